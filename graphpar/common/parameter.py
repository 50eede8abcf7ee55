"""``Parameter``: a trainable (or frozen) array owned by a Cell, stored as a flax NNX ``Param``.

Being an NNX variable is what lets graphpar split a Cell tree into a pure pytree of arrays for ``jax.jit`` and merge
it back: the Cell tree is the NNX graph, a Parameter's value is a leaf of its state. MindSpore's attributes live in
the variable's metadata: ``name`` (the attribute path, ``fc1.weight``, unless the user named it), ``requires_grad``,
``layerwise_parallel`` and ``parallel_optimizer``.

A Parameter made inside ``no_init_parameters()`` from ``initializer(...)`` holds a ``Deferred`` value: its shape and
dtype, with the draw that makes it, and no data (:attr:`Parameter.has_init`). Tracing and planning read its shape;
its program's first compile draws it where it lives (``graphpar.common.deferred.born``); ``init_data()``,
``asnumpy()`` or ``Cell.init_parameters_data()`` draw it now, ``set_data`` (a checkpoint load) replaces it.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphpar._logging import notice_once
from graphpar.common import dtype as mstype
from graphpar.common._convert import to_array
from graphpar.common.deferred import Deferred

DEFAULT_NAME = "Parameter"


def _to_array(value: Any, what: str) -> jax.Array:
    if isinstance(value, Parameter):
        return value.get_value()
    if isinstance(value, (jax.Array, np.ndarray, list, tuple, int, float, bool, np.generic)):
        return to_array(value)
    raise TypeError(f"{what}: expected an array, Tensor, number or initializer result, got {type(value).__name__}")


class Parameter(nnx.Param):
    """``Parameter(default_input, name=None, requires_grad=True, layerwise_parallel=False, parallel_optimizer=True)``.

    ``default_input`` is an array, a ``Tensor``, a number or the result of ``initializer(...)``. When ``name`` is
    not given, the Cell that holds the Parameter names it after its attribute path (``fc1.weight``).
    """

    def __init__(self, default_input: Any = None, name: str | None = None, requires_grad: bool = True,
                 layerwise_parallel: bool = False, parallel_optimizer: bool = True, **metadata: Any):
        # NNX rebuilds variables through this constructor with the stored metadata; accept it unchanged.
        value = (default_input if isinstance(default_input, (jax.Array, Deferred))
                 else _to_array(default_input, "Parameter()"))
        metadata.setdefault("user_named", name is not None and name != DEFAULT_NAME)
        super().__init__(value, name=name or DEFAULT_NAME, requires_grad=bool(requires_grad),
                         layerwise_parallel=bool(layerwise_parallel), parallel_optimizer=bool(parallel_optimizer),
                         **metadata)

    # MindSpore attributes, kept in the NNX metadata so that they survive split/merge.
    @property
    def name(self) -> str:
        return self.get_metadata("name")

    @name.setter
    def name(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError(f"Parameter name must be a non-empty string, got {value!r}")
        self.set_metadata(name=value)

    @property
    def requires_grad(self) -> bool:
        return self.get_metadata("requires_grad")

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.set_metadata(requires_grad=bool(value))

    @property
    def layerwise_parallel(self) -> bool:
        return self.get_metadata("layerwise_parallel")

    @property
    def parallel_optimizer(self) -> bool:
        """MindSpore's ``parallel_optimizer``: False keeps this Parameter (and its optimizer state) out of the
        parallel optimizer's sharding. Read when a train program is built for the settings in force, as MindSpore
        reads it when it compiles the graph: set it before the first step."""
        return self.get_metadata("parallel_optimizer")

    @parallel_optimizer.setter
    def parallel_optimizer(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"Parameter '{self.name}'.parallel_optimizer must be a bool, got {value!r}")
        self.set_metadata(parallel_optimizer=value)

    @property
    def pipeline_stages(self) -> tuple[int, ...]:
        """The stages given by :meth:`add_pipeline_stage` (MindSpore's ``Parameter.pipeline_stages``)."""
        return self.get_metadata().get("pipeline_stages", ())

    def add_pipeline_stage(self, stage: int) -> None:
        """MindSpore's ``add_pipeline_stage(stage)``: declares that pipeline ``stage`` uses this Parameter (a tied
        embedding). graphpar finds the stages from the Cells that use it, giving each a copy whose gradients are
        summed (``compile.pipeline.transfer``), so the declaration is recorded and said once, not needed."""
        if not isinstance(stage, int) or isinstance(stage, bool) or stage < 0:
            raise TypeError(f"Parameter '{self.name}'.add_pipeline_stage({stage!r}): `stage` must be a positive "
                            "number of int type")
        notice_once("add_pipeline_stage", "Parameter.add_pipeline_stage(...) is recorded (Parameter.pipeline_stages) "
                    "but not needed: graphpar gives each pipeline stage whose Cells use a Parameter its own copy and "
                    "sums their gradients", logging.INFO)
        if stage not in self.pipeline_stages:
            self.set_metadata(pipeline_stages=self.pipeline_stages + (stage,))

    @property
    def data(self) -> "Parameter":
        return self

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.get_value().dtype)

    @property
    def ndim(self) -> int:
        return len(self.get_value().shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.get_value().shape))

    def value(self) -> Any:
        """MindSpore's ``Parameter.value()``: the Tensor this Parameter holds (a traced array inside construct).

        A method, as in MindSpore, in place of NNX's deprecated ``Variable.value`` property (flax itself reads
        ``get_value()``; ``param[...]`` still works)."""
        return self.get_value()

    @property
    def has_init(self) -> bool:
        """True while the value is deferred (made inside ``no_init_parameters()``, not drawn yet)."""
        return isinstance(self.get_value(), Deferred)

    def asnumpy(self) -> np.ndarray:
        return np.asarray(self.init_data().get_value())

    def init_data(self) -> "Parameter":
        """Draw a deferred value now, on the default device (MindSpore's ``init_data``); else nothing to do."""
        value = self.get_value()
        if isinstance(value, Deferred):
            self.set_value(value.value())
        return self

    def set_data(self, data: Any, slice_shape: bool = False) -> "Parameter":
        """Replace the value; the shape must stay the same (MindSpore's rule) unless ``slice_shape``."""
        new = data.value() if isinstance(data, Deferred) else _to_array(data, f"Parameter '{self.name}'.set_data()")
        old = self.get_value()
        if not slice_shape and tuple(new.shape) != tuple(old.shape):
            raise ValueError(f"Parameter '{self.name}'.set_data(): new shape {tuple(new.shape)} differs from the "
                             f"parameter's shape {tuple(old.shape)}")
        if new.dtype != old.dtype:
            new = new.astype(old.dtype)
        self.set_value(new)
        return self

    def clone(self, init: Any = "same") -> "Parameter":
        value = self.get_value() if init == "same" else _to_array(init, "Parameter.clone()")
        value = value if isinstance(value, Deferred) else jnp.array(value)  # a deferred one stays deferred
        return Parameter(value, name=self.name, requires_grad=self.requires_grad,
                         layerwise_parallel=self.layerwise_parallel, parallel_optimizer=self.parallel_optimizer)

    # A Parameter compares as the Tensor it holds (MindSpore's Parameter is a Tensor): ``while self.index < 3``
    # in construct reads its value (NNX's Variable gives arithmetic but no ordering).
    def __lt__(self, other: Any) -> Any:
        return self.get_value() < other

    def __le__(self, other: Any) -> Any:
        return self.get_value() <= other

    def __gt__(self, other: Any) -> Any:
        return self.get_value() > other

    def __ge__(self, other: Any) -> Any:
        return self.get_value() >= other

    # ``self.step += 1`` in construct assigns the Parameter (MindSpore's graph mode: augmented assignment of a
    # Parameter is an Assign); the Parameter stays the Cell's (NNX refuses in-place operators on a Variable).
    def __iadd__(self, other: Any) -> "Parameter":
        self.set_value(self.get_value() + other)
        return self

    def __isub__(self, other: Any) -> "Parameter":
        self.set_value(self.get_value() - other)
        return self

    def __imul__(self, other: Any) -> "Parameter":
        self.set_value(self.get_value() * other)
        return self

    def __itruediv__(self, other: Any) -> "Parameter":
        self.set_value(self.get_value() / other)
        return self

    def __repr__(self) -> str:
        return (f"Parameter (name={self.name}, shape={tuple(self.shape)}, dtype={mstype.ms_name(self.dtype)}, "
                f"requires_grad={self.requires_grad})")

    __str__ = __repr__


class ParameterTuple(tuple):
    """MindSpore's ``ParameterTuple``: a tuple that only holds Parameters."""

    def __new__(cls, iterable):
        items = tuple(iterable)
        for item in items:
            if not isinstance(item, Parameter):
                raise TypeError(f"ParameterTuple holds Parameters only, got {type(item).__name__}")
        return super().__new__(cls, items)
