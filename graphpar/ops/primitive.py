"""``Primitive``: the base of every graphpar op (``ops.MatMul()``, ``ops.ReLU()``, ...).

An op is an object, as in MindSpore: it is created once (usually as a Cell attribute, whose name becomes the op's
*instance name*), optionally given a strategy with ``.shard(in_strategy, out_strategy)``, and called in
``construct``. Its math is a pure ``jnp`` function, :meth:`Primitive.compute`.

While a network is traced for the graph IR, each call computes inline under the named scope ``graphpar_op_{id}``
and the recorder keeps its input and output tracers (see ``graphpar.ir.recorder``); a call they cannot delimit
(an output that is an input, a constant input) becomes one ``jit`` equation whose operands are the op's tensor
inputs. Otherwise the op just computes.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any, ClassVar

import jax
import numpy as np
from flax import nnx

from graphpar._logging import notice_once
from graphpar.errors import StrategyError
from graphpar.ir import construct_errors
from graphpar.ir import recorder as _recorder
from graphpar.ir.debug_names import assigned_name
from graphpar.ops._mixed_precision import cast_tree
from graphpar.errors import StrategyError
from graphpar.ops.strategy import Strategy, check_ranks, check_structure
from graphpar.planner.layout import is_layout_strategy


# MindSpore's Primitive.set_device documents the first three; its parallel infos read any target but "CPU" as the
# accelerator, and its tests (and nn.EmbeddingLookup's target) name that one "Device"
_DEVICE_TARGETS = ("CPU", "GPU", "Ascend", "Device")
_STAGE = object()  # _inline_call's answer for a call that must be staged as a jit equation


def _is_tensor(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


def _construct_code(cell_stack: list) -> Any:
    """The code of the innermost running Cell's ``construct`` (None at the root, or when ``construct`` is not a
    plain function, e.g. a decorated one): where an op's call is written."""
    construct = type(cell_stack[-1]).construct if cell_stack and cell_stack[-1] is not None else None
    return construct.__code__ if isinstance(construct, types.FunctionType) else None


def _is_static(x: Any) -> bool:
    """A call argument that is not (and holds no) tensor: an axis, a shape, a dtype."""
    if isinstance(x, (tuple, list)):
        return all(_is_static(v) for v in x)
    return not _is_tensor(x) and not isinstance(x, jax.core.Tracer)


def _unwrap(x: Any) -> Any:
    if isinstance(x, nnx.Variable):
        return x.get_value()
    if isinstance(x, (tuple, list)) and any(isinstance(v, nnx.Variable) for v in x):
        return type(x)(_unwrap(v) for v in x)
    return x


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


class Primitive:
    """Base class. Subclasses set ``input_names`` (the tensor inputs, in order; ``None`` for an op whose first
    argument is a tuple of tensors) and implement :meth:`compute`."""

    input_names: ClassVar[tuple[str, ...] | None] = ("x",)
    # trailing input_names that may be given as a number: a strategy then has no entry for them (MaskedFill's value)
    optional_inputs: ClassVar[int] = 0
    _amp_cast: Any = None  # amp_level="O1" on a white-listed op: ops._mixed_precision.CellCast

    def __init__(self, **attrs: Any) -> None:
        self.attrs: dict[str, Any] = dict(attrs)
        self.in_strategy: Strategy | None = None
        self.out_strategy: Strategy | None = None
        self._instance_name: str | None = None

    # --- MindSpore surface -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The primitive's kind, as MindSpore prints it (``MatMul``)."""
        return type(self).__name__

    @property
    def instance_name(self) -> str:
        return self._instance_name or _snake(self.name)

    @property
    def primitive_target(self) -> str | None:
        """The target :meth:`set_device` recorded (MindSpore reads it as ``prim.primitive_target``)."""
        return self.attrs.get("primitive_target")

    def set_prim_instance_name(self, instance_name: str) -> "Primitive":
        self._instance_name = instance_name
        return self

    def add_prim_attr(self, name: str, value: Any) -> "Primitive":
        self.attrs[name] = value
        return self

    def recompute(self, mode: bool = True) -> "Primitive":
        """MindSpore's ``Primitive.recompute(mode=True)``: the backward pass recomputes this op's output instead of
        keeping it (its node is lowered inside ``jax.checkpoint``, see ``graphpar.compile.lowering.recompute``)."""
        if not isinstance(mode, bool):
            raise TypeError(f"{self.name}.recompute(mode): mode must be a bool, got {mode!r}")
        self.attrs["recompute"] = mode
        return self

    def shard(self, in_strategy: Any = None, out_strategy: Any = None) -> "Primitive":
        """Record a sharding strategy: one tuple per tensor input, one split per dimension.

        The structure is checked now; ranks are checked when the network is traced, divisibility and device count
        when the parallel plan is made. STAND_ALONE and DATA_PARALLEL accept and ignore strategies, as MindSpore.
        ``shard(None)`` (MindSpore's default) sets no strategy: the op is planned as if ``shard`` had not been
        called (the mode's default, propagation or the search decides), and clears one given before. An
        ``out_strategy`` needs an ``in_strategy`` (MindSpore raises ``ValueError``, so does this).
        """
        if in_strategy is None:
            if out_strategy is not None:
                raise StrategyError(self.name, out_strategy, "an out_strategy needs an in_strategy, and "
                                    "in_strategy is None", hint="Give both, e.g. shard(((2, 4), (4, 1)), ((8, 1),)),"
                                    " or neither")
            self.in_strategy = self.out_strategy = None
            return self
        n_inputs = None if self.input_names is None else len(self.input_names)
        if n_inputs is not None and isinstance(in_strategy, tuple) and (
                n_inputs - self.optional_inputs <= len(in_strategy) < n_inputs):
            n_inputs = len(in_strategy)
        self.in_strategy = check_structure(self.name, in_strategy, n_inputs, "in_strategy", self.input_names)
        self.out_strategy = None
        if out_strategy is not None:
            self.out_strategy = check_structure(self.name, out_strategy, None, "out_strategy")
        if (self.out_strategy is not None
                and is_layout_strategy(self.in_strategy) != is_layout_strategy(self.out_strategy)):
            raise StrategyError(self.name, out_strategy, "in_strategy and out_strategy must both be written with "
                                "layouts or both with tuples of ints", hint="Write out_strategy as in_strategy is")
        return self

    def set_device(self, device_target: str) -> "Primitive":
        """MindSpore's ``Primitive.set_device(device_target)``: the device this op runs on ("CPU" for a Gather whose
        table lives on the host, "GPU", "Ascend", "Device" for whichever accelerator the job has), recorded as the
        attribute ``primitive_target`` (it shows in the IR dumps' ``primitive_attrs``).

        On a JAX mesh one compiled program runs every op on the mesh's devices, so the target moves no
        computation: the op is planned and placed like any other (said once per op kind in a notice). ``""`` (what
        MindSpore's tests pass for "no target") records no target."""
        if device_target == "":
            self.attrs.pop("primitive_target", None)
            return self
        if device_target not in _DEVICE_TARGETS:
            raise ValueError(f"{self.name}.set_device({device_target!r}): the target must be one of "
                             f"{', '.join(map(repr, _DEVICE_TARGETS))} (or '' for none)")
        notice_once(f"set_device:{self.name}:{device_target}",
                    f"{self.name}.set_device({device_target!r}) is recorded as primitive_target in the IR; graphpar "
                    f"runs every op of a compiled program on the mesh's devices, so it moves no computation")
        self.attrs["primitive_target"] = device_target
        return self

    # --- execution ---------------------------------------------------------------------------------------------
    def compute(self, *args: Any) -> Any:
        raise NotImplementedError(f"{self.name}.compute")

    def _tensor_arg_indices(self) -> tuple[int, ...]:
        """Positions, among the call's arguments, of the declared tensor inputs (``input_names``)."""
        return tuple(range(len(self.input_names or ())))

    def _strategies_for(self, shapes: list[tuple[int, ...]], scope: str) -> tuple[Strategy | None, Strategy | None]:
        """``(in_strategy, out_strategy)`` in graphpar's form for a call on inputs of ``shapes``: the user's, unless
        the op's MindSpore strategy is written another way (OneHot's is shaped like its output)."""
        return self.in_strategy, self.out_strategy

    def _named_strategies(self, shapes: list[tuple[int, ...]], names: tuple[str, ...],
                          scope: str) -> tuple[Strategy | None, Strategy | None]:
        """:meth:`_strategies_for`, for an op whose translation needs to know which inputs were given (``names``:
        an op with optional inputs, whose strategy has entries for the given ones only)."""
        return self._strategies_for(shapes, scope)

    def _strategy_shapes(self, shapes: list[tuple[int, ...]], args: tuple) -> list[tuple[int, ...]]:
        """The shapes a strategy's entries describe, one split per dimension: the tensor inputs' shapes, unless
        MindSpore writes the op's strategy over another shape (Tile's has one split per multiple)."""
        return shapes

    def _tensor_positions(self, args: tuple) -> list[tuple[int, int | None]]:
        """(argument index, element index or None) of every tensor input among ``args``."""
        if self.input_names is None:
            return [(0, j) for j, v in enumerate(args[0]) if _is_tensor(v)]
        return [(i, None) for i in self._tensor_arg_indices() if i < len(args) and _is_tensor(args[i])]

    def __call__(self, *args: Any) -> Any:
        args = tuple(_unwrap(a) for a in args)
        spec = self._amp_cast
        if spec is not None:  # amp O1: inputs in the low type, the output back in float32
            return cast_tree(self._dispatch(cast_tree(args, spec.compute)), spec.output)
        return self._dispatch(args)

    def _dispatch(self, args: tuple) -> Any:
        recorder = _recorder.active()
        if recorder is None:
            return self.compute(*args)
        return self._traced_call(recorder, args)

    def _traced_call(self, recorder: _recorder.TraceRecorder, args: tuple) -> Any:
        positions = self._tensor_positions(args)
        tensors = [args[i] if j is None else args[i][j] for i, j in positions]
        if self.input_names is None:
            names = tuple(f"x{j}" for _, j in positions)
        else:
            name_of = dict(zip(self._tensor_arg_indices(), self.input_names))
            names = tuple(name_of[i] for i, _ in positions)
        scope = recorder.scope
        if self.in_strategy is not None:
            # A declared tensor input given as a Python scalar counts as rank 0 (MindSpore writes () for it).
            if self.input_names is None:
                shapes, all_names = [tuple(np.shape(t)) for t in tensors], names
            else:
                # an input given as None has no strategy entry (MindSpore's optional inputs)
                present = [i for i in self._tensor_arg_indices() if i < len(args) and args[i] is not None]
                while len(present) > len(self.in_strategy) and not _is_tensor(args[present[-1]]) and (
                        present[-1] >= len(self.input_names) - self.optional_inputs):
                    present.pop()  # an optional input given as a number, without a strategy entry
                shapes = [tuple(np.shape(args[i])) for i in present]
                name_of = dict(zip(self._tensor_arg_indices(), self.input_names))
                all_names = tuple(name_of.get(i, f"input {i}") for i in present)
            in_strategy, out_strategy = self._named_strategies(shapes, all_names, scope)
            check_ranks(self.instance_name, scope, in_strategy, self._strategy_shapes(shapes, args), all_names)
        else:
            in_strategy, out_strategy = None, self.out_strategy
        call_id = recorder.next_id()
        recorder.calls[call_id] = _recorder.OpCall(
            call_id=call_id, kind=self.name, instance_name=self.instance_name, scope=scope,
            attrs=dict(self.attrs), in_strategy=in_strategy, out_strategy=out_strategy,
            input_names=names, op=self,
            static_args={i: a for i, a in enumerate(args) if _is_static(a)},
            debug_name=assigned_name(_construct_code(recorder.cell_stack)))

        if recorder.inline and all(isinstance(t, jax.core.Tracer) for t in tensors):
            out = self._inline_call(recorder.calls[call_id], args, tensors, names, scope)
            if out is not _STAGE:
                return out

        def body(*inner):
            full = list(args)
            if self.input_names is None:
                seq = list(args[0])
                for (_, j), t in zip(positions, inner):
                    seq[j] = t
                full[0] = type(args[0])(seq)
            else:
                for (i, _), t in zip(positions, inner):
                    full[i] = t
            return self.compute(*full)

        body.__name__ = body.__qualname__ = f"{_recorder.OP_EQN_PREFIX}{call_id}"
        with self._naming_errors(scope, names, tensors):
            return jax.jit(body)(*tensors)

    @contextlib.contextmanager
    def _naming_errors(self, scope: str, names: tuple, tensors: list) -> Iterator[None]:
        """A JAX shape-rule error names no op: re-raise it saying which op, where, on what inputs."""
        try:
            yield
        except Exception as exc:
            translated = construct_errors.for_op(exc, self.instance_name, self.name, scope, names, tensors)
            if translated is exc:
                raise
            raise translated from None

    def _inline_call(self, call: _recorder.OpCall, args: tuple, tensors: list, names: tuple, scope: str) -> Any:
        """Compute the call inline under its marker scope; :data:`_STAGE` when its outputs cannot delimit it (a
        non-array output, an output that is an input or repeats another), so it is staged as a ``jit`` instead."""
        with jax.named_scope(f"{_recorder.OP_EQN_PREFIX}{call.call_id}"), self._naming_errors(scope, names, tensors):
            out = self.compute(*args)
        leaves = jax.tree.leaves(out)
        ids = {id(t) for t in tensors}
        if (not leaves or not all(isinstance(x, jax.core.Tracer) for x in leaves) or any(id(x) in ids for x in leaves)
                or len({id(x) for x in leaves}) != len(leaves)):
            return _STAGE
        call.tensors, call.outputs = list(tensors), leaves
        return out

    def __repr__(self) -> str:
        return f"Prim[{self.name}]<{self.instance_name}>"
