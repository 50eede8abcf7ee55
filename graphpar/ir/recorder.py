"""What ops and Cells report while a network is being traced into the graph IR.

Tracing runs the user's ``construct`` under ``jax.make_jaxpr``. While a :class:`TraceRecorder` is active:

* every Cell call pushes its scope label (``Default``, ``network-WithLossCell``, ``_backbone-Net``) as a
  ``jax.named_scope``, so raw ``jnp``/``lax`` equations carry their Cell scope in their name stack;
* every graphpar op call runs under the named scope ``graphpar_op_{id}``, inline, and the recorder keeps an
  :class:`OpCall` for that id (instance name, scope, attributes, strategy, and the call's input and output tracers,
  which ``graphpar.ir.trace`` turns into jaxpr variables). The graph builder turns that call's equations into the op
  node. A call that cannot be delimited that way (an input that is not a tracer, an output that is an input) is
  one ``jit`` equation named ``graphpar_op_{id}`` whose operands are exactly the op's tensor inputs.

Outside tracing (eager PYNATIVE runs, the lowered program) the recorder is inactive and ops run their
implementation directly.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax

from graphpar.ir import construct_errors

OP_EQN_PREFIX = "graphpar_op_"


@dataclass
class OpCall:
    """One call of a graphpar op, as recorded at trace time."""

    call_id: int
    kind: str                       # MindSpore primitive name: "MatMul"
    instance_name: str              # attribute name in its Cell: "matmul"
    scope: str                      # Cell scope: "Default/network-WithLossCell/_backbone-Net"
    attrs: dict[str, Any]           # primitive attributes (transpose_a, keep_dims, axis, ...)
    in_strategy: tuple | None
    out_strategy: tuple | None
    input_names: tuple[str, ...]    # names of the tensor inputs, in order
    static_args: dict[int, Any] = field(default_factory=dict)  # non-tensor call arguments by position (axis, ...)
    debug_name: str = ""  # the construct variable the result is assigned to ("" none; ir.debug_names)
    op: Any = field(repr=False, default=None)
    # traced inline (see ``graphpar.ir.trace``): the call's tensor inputs and output leaves, as tracers of the trace
    tensors: list[Any] | None = field(repr=False, default=None)
    outputs: list[Any] | None = field(repr=False, default=None)


class TraceRecorder:
    """Collects :class:`OpCall` records and the Cell scope stack during one trace."""

    def __init__(self, inline: bool = True, defer_input_checks: bool = False) -> None:
        self.inline = inline  # trace op calls inline (False: every call is its own ``jit`` equation)
        # Checks of values known only at run time (ops.runtime_checks) on a batch input as it enters the program:
        # with defer_input_checks, an op whose checked operand *is* batch input j records the check here instead of
        # compiling it into the program, and the runtime that asked makes it on the batch outside the program
        # (in-program, a GPU copies the check's predicate to the host mid-step: a stall that doubled ResNet's step).
        self.defer_input_checks = defer_input_checks
        self.batch_inputs: list[Any] = []  # the tracers of the batch inputs, in order (set when tracing starts)
        self.input_checks: list[Any] = []  # what the ops deferred (ops.runtime_checks.InputCheck), in trace order
        self.calls: dict[int, OpCall] = {}
        self.scope_stack: list[str] = []
        self.cell_stack: list[Any] = []  # the Cell objects behind scope_stack (None for the root "Default")
        self.recompute_scopes: dict[str, Any] = {}  # Cell scope -> RecomputeConfig of Cells marked recompute()
        self.inner_gradients = 0  # gradients taken inside construct (GradOperation, grad) being traced now
        self.gradient_taken = False  # whether any was: the traced program holds a backward (Graph.inner_gradient)
        self._ids = itertools.count()

    @property
    def scope(self) -> str:
        return "/".join(self.scope_stack)

    def batch_input_index(self, value: Any) -> int | None:
        """Which batch input ``value`` is (the very tracer the trace started with), None if it is none of them."""
        return next((j for j, x in enumerate(self.batch_inputs) if x is value), None)

    def next_id(self) -> int:
        return next(self._ids)


_active: contextvars.ContextVar[TraceRecorder | None] = contextvars.ContextVar("graphpar_trace", default=None)


def active() -> TraceRecorder | None:
    return _active.get()


@contextlib.contextmanager
def recording(inline: bool = True, defer_input_checks: bool = False) -> Iterator[TraceRecorder]:
    recorder = TraceRecorder(inline, defer_input_checks)
    token = _active.set(recorder)
    try:
        yield recorder
    finally:
        _active.reset(token)


@contextlib.contextmanager
def inner_gradient() -> Iterator[None]:
    """While a gradient taken inside ``construct`` (``GradOperation``, ``grad``, ``value_and_grad`` outside a
    compiled training step) traces its function: JAX writes that gradient's backward into the traced program, so
    a recomputed Cell called in it must carry its own ``jax.checkpoint`` (``nn.cell``) for the backward to
    recompute it. A no-op when not tracing."""
    recorder = _active.get()
    if recorder is None:
        yield
        return
    recorder.inner_gradients += 1
    recorder.gradient_taken = True
    try:
        yield
    finally:
        recorder.inner_gradients -= 1


@contextlib.contextmanager
def standing_in(cell: Any) -> Iterator[None]:
    """While ``cell`` (a copy of the innermost running Cell, made to run it under a transformation) runs in its
    place: the scopes of the Cells it calls are found through it."""
    recorder = _active.get()
    if recorder is None:
        yield
        return
    original = recorder.cell_stack[-1]
    recorder.cell_stack[-1] = cell
    try:
        yield
    finally:
        recorder.cell_stack[-1] = original


def in_inner_gradient() -> bool:
    recorder = _active.get()
    return recorder is not None and recorder.inner_gradients > 0


@contextlib.contextmanager
def cell_scope(label: str, cell: Any = None, recompute: Hashable | None = None) -> Iterator[None]:
    """Push a Cell's scope label while it runs (no-op when not tracing). ``recompute``: the Cell's
    ``recompute_config`` (an ``nn._recompute.RecomputeConfig``, None when the Cell is not recomputed), passed by the
    Cell itself since ir sits below nn and does not know the Cell type."""
    recorder = _active.get()
    if recorder is None:
        yield
        return
    recorder.scope_stack.append(label)
    recorder.cell_stack.append(cell)
    if recompute is not None:  # Cell.recompute(): the lowering evaluates this scope's nodes under jax.checkpoint
        recorder.recompute_scopes.setdefault(recorder.scope, recompute)
    try:
        with jax.named_scope(label):
            yield
    except Exception as exc:  # name the innermost Cell in JAX's trace-time errors (see construct_errors)
        translated = construct_errors.for_cell(exc, recorder.scope, type(cell).__name__ if cell else label)
        if translated is exc:
            raise
        raise translated from None
    finally:
        recorder.scope_stack.pop()
        recorder.cell_stack.pop()
