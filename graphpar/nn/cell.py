"""``Cell``: MindSpore's module class, built on a flax NNX ``Module``.

A Cell registers the child Cells, Parameters and ops assigned to it as attributes:

* a Parameter with no name of its own is named after its attribute (``weight``);
* a child Cell assigned to a Cell with ``auto_prefix=True`` (the default) gets every parameter renamed to its
  attribute path (``fc1.weight``), as MindSpore's ``update_parameters_name`` does;
* an op is given its *instance name* (``matmul``), which the IR prints and strategies are reported under.

Calling a Cell runs ``construct``. While tracing, each call pushes the Cell's scope label so that every op knows its
scope (``Default/network-WithLossCell/_backbone-Net``).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import jax
import numpy as _np
from flax import nnx

from graphpar.common import dtype as mstype
from graphpar.common.api import _cell_graph_executor
from graphpar._logging import notice_once
from graphpar.common.deferred import born
from graphpar.common.parameter import DEFAULT_NAME, Parameter
from graphpar.common.placeholder import check_call, signature_of
from graphpar.errors import CellError, api_boundary
from graphpar.ir import recorder as _recorder
from graphpar.ir.control_flow import for_trace
from graphpar.ops import _mixed_precision
from graphpar.nn import _cell_flags, _comm_fusion
from graphpar.nn._pipeline_placement import PipelinePlacement
from graphpar.nn import _recompute
from graphpar.nn._recompute import RecomputeConfig, cell_config
from graphpar.nn.runner import top_level_call
from graphpar.nn.shard import call_sharded, check_shard, resolve_parameters
from graphpar.ops.primitive import Primitive

_CELL_FIELDS = ("_auto_prefix", "_scope_attr", "training", "_cell_order", "_param_order", "_recompute",
                "_pipeline_stage", "_pipeline_segment")
_FLAG_FIELDS = ("training", "_amp_cast")  # what compile.state.NetworkState.is_current compares
_revision = 0  # see revision()
_structure_revision = 0  # see structure_revision()


def revision() -> int:
    """Moves on every assignment of a Cell's ``training`` flag or mixed-precision cast (``set_train``,
    ``to_float``) and on every :func:`structure_revision` move: equal between two calls means no Cell changed in a
    way that could change a compiled step's program or the Variables it runs on.

    Only a Python-side "has anything changed?" check reads it: the training loop's fast path
    (``compile/runtime/bound_step.py``) compares it instead of every Cell's flags on every step and, when it moved, goes to
    the general path, which compares the flags and the split themselves. It never keys or invalidates a compiled
    program, so a ``set_train`` on an unrelated Cell costs one slower step, never a compile."""
    return _revision


def structure_revision() -> int:
    """Moves on every assignment (or deletion) of a Cell attribute other than graphpar's own bookkeeping, the flags
    and properties (their setters' own assignments count): a Parameter or Cell replaced (``net.fc.weight =
    Parameter(...)``), an op, a list of them, a static setting, a Tensor that is not a Parameter (``net.keep_prob =
    Tensor(0.5)``: a constant of the compiled graph, as in MindSpore's graph mode). A network split
    (``compile.state.NetworkState``) made before it moved is split again; the compile cache then finds the program
    again if the structure and the constants are in fact unchanged, and compiles one for the new constant if not."""
    return _structure_revision


def _moved(cell: "Cell", name: str, value: Any) -> None:
    global _revision, _structure_revision
    if name in _FLAG_FIELDS:
        _revision += 1
    elif name not in _CELL_FIELDS and not isinstance(getattr(type(cell), name, None), property):
        # a property's setter assigns its own
        _revision += 1
        _structure_revision += 1


class Cell(PipelinePlacement, nnx.Module, pytree=False):
    """Base class of every network: subclass it, assign layers and Parameters in ``__init__``, compute in
    ``construct``."""

    _amp_cast: Any = None  # a nn._mixed_precision.CellCast once to_float (or amp) set one
    _shard_spec: Any = None  # a nn.shard.ShardSpec once shard() set one
    _recompute: RecomputeConfig | None = None  # set by recompute(); read through recompute_config
    _input_signature: tuple | None = None  # set by set_inputs(): placeholders (shape, dtype) per input

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Cells are NNX graph nodes, not JAX pytrees: attributes may hold lists of Parameters, arrays and ops
        # freely (as MindSpore allows), and NNX still finds every Variable when splitting.
        kwargs.setdefault("pytree", False)
        super().__init_subclass__(**kwargs)

    def __init__(self, auto_prefix: bool = True, flags: dict | None = None):
        object.__setattr__(self, "_auto_prefix", auto_prefix)
        self._ensure_fields()
        if flags:
            self.add_flags(**flags)

    def _ensure_fields(self) -> None:
        # Subclasses that forget super().__init__() still work, as in MindSpore's newer versions.
        d = self.__dict__
        if "_cell_order" not in d:
            object.__setattr__(self, "_cell_order", [])
            object.__setattr__(self, "_param_order", [])
            object.__setattr__(self, "training", False)
            object.__setattr__(self, "_scope_attr", None)
        if "_auto_prefix" not in d:
            object.__setattr__(self, "_auto_prefix", True)

    # --- registration ------------------------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Parameter) and vars(self).get(name) is value:
            return  # `self.step += 1` rebinds the same Parameter (Parameter.__iadd__ assigned its value)
        _moved(self, name, value)
        if name in _CELL_FIELDS:
            object.__setattr__(self, name, value)
            return
        self._ensure_fields()
        if isinstance(value, Parameter):
            if value.name == DEFAULT_NAME:
                value.name = name
            if name not in self._param_order:
                self._param_order.append(name)
        elif isinstance(value, Cell):
            value._scope_attr = name
            if self._auto_prefix:
                value.update_parameters_name(name + ".")
            if name not in self._cell_order:
                self._cell_order.append(name)
        elif isinstance(value, Primitive):
            value.set_prim_instance_name(name)
        elif value is None:
            for order in (self._cell_order, self._param_order):
                if name in order:
                    order.remove(name)
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        _moved(self, name, None)
        for order in (self._cell_order, self._param_order):
            if name in order:
                order.remove(name)
        super().__delattr__(name)

    def insert_child_to_cell(self, child_name: str, child_cell: "Cell") -> None:
        setattr(self, child_name, child_cell)

    def insert_param_to_cell(self, param_name: str, param: Parameter, check_name_contain_dot: bool = True) -> None:
        if check_name_contain_dot and "." in param_name:
            raise KeyError(f"insert_param_to_cell(): the name {param_name!r} must not contain '.'")
        setattr(self, param_name, param)

    def update_parameters_name(self, prefix: str = "", recurse: bool = True) -> None:
        """Rename every parameter to ``prefix`` + its attribute path (MindSpore's rule for child Cells)."""
        for path, param in self.parameters_and_names(expand=recurse):
            param.name = prefix + path

    # --- traversal ---------------------------------------------------------------------------------------------
    def name_cells(self) -> "OrderedDict[str, Cell]":
        self._ensure_fields()
        return OrderedDict((n, getattr(self, n)) for n in self._cell_order if getattr(self, n, None) is not None)

    def cells(self) -> list["Cell"]:
        return list(self.name_cells().values())

    def _own_params(self) -> Iterator[tuple[str, Parameter]]:
        self._ensure_fields()
        for n in self._param_order:
            p = getattr(self, n, None)
            if isinstance(p, Parameter):
                yield n, p

    def cells_and_names(self, cells: set | None = None, name_prefix: str = "") -> Iterator[tuple[str, "Cell"]]:
        """Every Cell once, depth first, with its attribute path (this Cell is ``''``)."""
        seen = cells if cells is not None else set()
        if id(self) in seen:
            return
        seen.add(id(self))
        yield name_prefix, self
        for name, cell in self.name_cells().items():
            yield from cell.cells_and_names(seen, f"{name_prefix}.{name}" if name_prefix else name)

    def parameters_and_names(self, name_prefix: str = "", expand: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Every Parameter once, with its attribute path (``fc1.weight``)."""
        cells = self.cells_and_names(name_prefix=name_prefix) if expand else [(name_prefix, self)]
        seen: set[int] = set()
        for cell_name, cell in cells:
            for par_name, par in cell._own_params():
                if id(par) in seen:
                    continue
                seen.add(id(par))
                yield (f"{cell_name}.{par_name}" if cell_name else par_name), par

    def get_parameters(self, expand: bool = True) -> Iterator[Parameter]:
        for _, param in self.parameters_and_names(expand=expand):
            yield param

    def trainable_params(self, recurse: bool = True) -> list[Parameter]:
        return [p for p in self.get_parameters(expand=recurse) if p.requires_grad]

    @property
    def parameter_layout_dict(self) -> dict[str, list]:
        """Each Parameter's layout in this Cell's last compile (``_cell_graph_executor.compile``) or, for a train
        cell, the step it last ran: ``{name: [device_arrangement, tensor_map, slice_shape, field_size,
        uniform_split, opt_shard_group]}``; ``{}`` before either and outside SEMI_AUTO / AUTO, as MindSpore's."""
        return _cell_graph_executor.parameter_layouts(self)

    def untrainable_params(self, recurse: bool = True) -> list[Parameter]:
        return [p for p in self.get_parameters(expand=recurse) if not p.requires_grad]

    def parameters_dict(self, recurse: bool = True) -> "OrderedDict[str, Parameter]":
        return OrderedDict((p.name, p) for p in self.get_parameters(expand=recurse))

    def init_parameters_data(self, auto_parallel_mode: bool = False) -> dict[str, Parameter]:
        """Draw every deferred Parameter (made inside ``no_init_parameters()``) now, all in one program on the
        default device, with the values an eager draw would have given (MindSpore's ``init_parameters_data``; a
        compiled step draws them itself, where they live). MindSpore returns {old Parameter: new Parameter}; graphpar
        updates each Parameter in place (and NNX variables are not hashable), so the dict maps the name of each
        Parameter drawn to it."""
        if auto_parallel_mode:
            notice_once("init-parameters-auto-parallel",
                        "init_parameters_data(auto_parallel_mode=True): parameters are drawn whole on the default "
                        "device; the first compiled step moves each to its planned layout (to draw each device's "
                        "block only, leave them deferred: the first step draws them where they live)")
        pending = [p for p in self.get_parameters() if p.has_init]
        if not pending:
            return {}
        arrays, _ = born([p.get_value() for p in pending])
        for param, value in zip(pending, arrays):
            param.set_value(value)
        return {p.name: p for p in pending}

    def check_names(self) -> None:
        """Raise :class:`CellError` if two different Parameters share a name (MindSpore refuses that too)."""
        owners: dict[str, str] = {}
        for path, param in self.parameters_and_names():
            if param.name in owners:
                raise CellError(
                    f"{type(self).__name__}: the Parameter name {param.name!r} is used twice (by "
                    f"'{owners[param.name]}' and '{path}'); give each Parameter a unique name, e.g. "
                    f"Parameter(..., name='{path}')")
            owners[param.name] = path

    # --- mixed precision (nn/_mixed_precision.py) ----------------------------------------------------------------
    def to_float(self, dst_type: Any) -> "Cell":
        """Compute this Cell and every Cell below it in ``dst_type`` (MindSpore's ``to_float``): floating inputs,
        the Cells' own Parameters and constants are cast when they run; the Parameters stay in their own dtype."""
        dtype = _np.dtype(dst_type)
        if dtype not in (mstype.float16, mstype.bfloat16, mstype.float32):
            raise TypeError(f"{type(self).__name__}.to_float(dst_type): expected float16, bfloat16 or float32, "
                            f"got {dst_type!r}")
        _mixed_precision.set_compute_dtype(self, dtype)
        return self

    def add_flags(self, **flags: Any) -> "Cell":
        """MindSpore's compile flags on this Cell (``nn/_cell_flags.py`` says which graphpar acts on)."""
        _cell_flags.precision(type(self).__name__, flags, recursive=False)
        self.__dict__.setdefault("_flags", {}).update(flags)
        return self

    def add_flags_recursive(self, **flags: Any) -> "Cell":
        """:meth:`add_flags` on this Cell and every Cell below it; ``fp16``/``bf16``/``fp32`` = :meth:`to_float`."""
        dtype = _cell_flags.precision(type(self).__name__, flags, recursive=True)
        if dtype is not None:
            self.to_float(dtype)
        for _, cell in self.cells_and_names():
            cell.__dict__.setdefault("_flags", {}).update(flags)
        return self

    def get_flags(self) -> dict[str, Any]:
        return dict(self.__dict__.get("_flags", {}))

    # --- modes -------------------------------------------------------------------------------------------------
    def set_train(self, mode: bool = True) -> "Cell":
        """Training (True) or evaluation mode for this Cell and every Cell below it. The flag is part of the
        network's structure: compiled programs are cached per structure, so switching back and forth reuses
        both programs."""
        for _, cell in self.cells_and_names():
            cell.training = bool(mode)
        return self

    def set_comm_fusion(self, fusion_type: int, recurse: bool = True) -> "Cell":
        """MindSpore's gradient-AllReduce fusion groups; XLA fuses by size instead (``nn._comm_fusion``)."""
        _comm_fusion.set_comm_fusion(self, fusion_type, recurse)
        return self

    def set_data_parallel(self) -> "Cell":
        """MindSpore's ``Cell.set_data_parallel()``: in AUTO_PARALLEL, every primitive of this Cell and the Cells
        below it that has no ``shard()`` strategy gets the batch split instead of a searched or propagated one
        (attribute ``strategy_gen_mode="data_parallel"``, read by the planner's ``set_data_parallel_strategies``)."""
        for _, cell in self.cells_and_names():
            for value in vars(cell).values():
                if isinstance(value, Primitive):
                    value.add_prim_attr("strategy_gen_mode", "data_parallel")
        return self

    def recompute(self, **kwargs: Any) -> "Cell":
        """MindSpore's ``Cell.recompute(mp_comm_recompute=True, parallel_optimizer_comm_recompute=False)``: the
        backward pass recomputes this Cell's activations from its inputs (``jax.checkpoint``, see
        ``graphpar.compile.lowering.recompute``)."""
        # a static attribute: part of the network's structure, so programs compiled before are not reused
        object.__setattr__(self, "_recompute", cell_config(self, kwargs))
        return self

    @property
    def recompute_config(self) -> RecomputeConfig | None:
        """How this Cell is recomputed (set by :meth:`recompute`), or None when it is not; the trace records it
        per Cell scope and the lowering reads it."""
        return self._recompute

    def set_grad(self, requires_grad: bool = True) -> "Cell":
        return self

    def set_inputs(self, *inputs: Any) -> None:
        """MindSpore's ``Cell.set_inputs``: the inputs a compile plans and every call must match (``Tensor(shape=[None,
        64], dtype=...)``: any size in a ``None`` dimension; ``graphpar.common.placeholder``)."""
        object.__setattr__(self, "_input_signature", signature_of(type(self).__name__, inputs))

    def get_inputs(self) -> list | None:
        return None if self._input_signature is None else list(self._input_signature)

    def set_auto_parallel(self) -> "Cell":
        """MindSpore's ``Cell.set_auto_parallel()`` (deprecated there): it marked a Cell for the parallel planner,
        which graphpar runs on every Cell compiled under SEMI_AUTO / AUTO_PARALLEL, so there is nothing to mark."""
        return self

    @property
    def cls_name(self) -> str:
        return type(self).__name__

    # --- calling -----------------------------------------------------------------------------------------------
    def construct(self, *inputs: Any, **kwargs: Any) -> Any:
        raise CellError(f"Cell '{type(self).__name__}' has no construct() method: define "
                        f"`def construct(self, *inputs)` computing its output")

    def _scope_label(self, recorder: Any) -> str:
        """MindSpore's scope segment ``{attribute}-{Class}``: the attribute under which the calling Cell holds
        this one (``Default`` at the root)."""
        if not recorder.scope_stack:
            return "Default"
        parent = recorder.cell_stack[-1]
        if parent is not None:
            for name in parent._cell_order:
                if getattr(parent, name, None) is self:
                    return f"{name}-{type(self).__name__}"
        return f"{self._scope_attr or 'network'}-{type(self).__name__}"

    @api_boundary
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._amp_cast is not None and not _mixed_precision.entered(self):  # to_float / amp_level
            return _mixed_precision.call(self, args, kwargs)
        self._ensure_fields()
        if type(self).construct is Cell.construct:
            raise CellError(f"Cell '{type(self).__name__}' has no construct() method: define "
                            f"`def construct(self, *inputs)` computing its output")
        recorder = _recorder.active()
        if recorder is None:  # a top-level call is checked against set_inputs (positional, as MindSpore's)
            if self._input_signature is not None and not kwargs:
                check_call(type(self).__name__, self._input_signature, args)
            runner = top_level_call(self, args, kwargs)
            if runner is not None:
                return runner(self, args, kwargs)
            if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves((args, kwargs))):
                return for_trace(self.construct)(*args, **kwargs)  # in a trace: `if` on a traced value compiled
            return self.construct(*args, **kwargs)  # eager: as written
        construct = for_trace(self.construct)  # inside a graph trace: `if` on a traced value compiled
        with _recorder.cell_scope(self._scope_label(recorder), self, self.recompute_config):
            if self._shard_spec is not None:  # Cell.shard / shard(cell, ...): layout constraints around construct
                return call_sharded(self._shard_spec, functools.partial(construct, **kwargs),
                                    dict(self.parameters_and_names()), args)
            if self.recompute_config is not None and _recorder.in_inner_gradient():
                return _recompute.checkpointed(self, self.recompute_config, kwargs, args)
            return construct(*args, **kwargs)

    def shard(self, in_strategy: Any, out_strategy: Any = None, parameter_plan: Any = None, device: str = "Ascend",
              level: int = 0) -> "Cell":
        """MindSpore 2.x's ``Cell.shard``: the layouts of this Cell's inputs, outputs and named Parameters (each a
        called ``Layout``, a tuple of ints or None), its ops planned by sharding propagation (``graphpar.nn.shard``)."""
        spec = check_shard(in_strategy, out_strategy, parameter_plan, device, level)
        self._shard_spec = resolve_parameters(spec, dict(self.parameters_and_names()))
        return self

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}<"]
        for name, cell in self.name_cells().items():
            inner = repr(cell).replace("\n", "\n  ")
            lines.append(f"  ({name}): {inner}")
        if len(lines) == 1:
            extra = self.extend_repr()
            return f"{type(self).__name__}<{extra}>"
        lines.append("  >")
        return "\n".join(lines)

    def extend_repr(self) -> str:
        return ""
