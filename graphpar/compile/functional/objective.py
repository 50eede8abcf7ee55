"""The differentiated function of a functional step as the network its program plans, and the lending of the
state a step function closes over to the trace that runs it.

A MindSpore step function reads its Parameters through the Cells it closes over (``net``, ``loss_fn``) and its
optimizer writes them in place. A compiled program takes them as explicit inputs and gives them back as outputs, so
while the program is traced those very Variables must hold the trace's values, and accept writes from the trace:
:func:`lent` gives them the trace's values and lets them belong to the current trace (flax NNX refuses a write to
a Variable from a trace other than the one it was created in), and puts their own values and trace back afterwards,
whatever happens. :func:`lent_optimizer_state` does the same for an optimizer's state.

:class:`StepObjective` is what a ``TrainOneStepCell``'s ``network`` is for ``Model.train``: a Cell whose call is the
loss. Its Cells are the ones the step reaches; its ``construct`` lends their Variables the values of the copy the
tracer merged (``compile.lowering.graph_trace``) and calls the user's function, which reads them through the
originals it closes over. It adds no scope of its own: the Cells the function calls are scoped from ``Default``.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax.numpy as jnp
from flax import nnx
from flax.nnx import tracers

from graphpar.errors import JitError
from graphpar.ir.control_flow import for_trace
from graphpar.nn.cell import Cell

_RAW = operator.attrgetter("_raw_value")  # the value slot (see compile.lowering.network_state: flax is pinned)


def variables_of(cells: Sequence[Cell], loose: Sequence[nnx.Variable] = ()) -> list[nnx.Variable]:
    """Every Variable of ``cells``' trees and ``loose``, each once, in NNX's traversal order (the same for a merged
    copy)."""
    out: dict[int, nnx.Variable] = {}
    for cell in cells:
        _, state = nnx.split(cell)  # the live Variables, as compile.lowering.network_state splits a network
        for _, value in nnx.to_flat_state(state):
            if isinstance(value, nnx.Variable):
                out.setdefault(id(value), value)
    for value in loose:
        out.setdefault(id(value), value)
    return list(out.values())


def read(variables: Sequence[nnx.Variable]) -> list[Any]:
    """The values the Variables hold now (the lent values, or what the trace wrote into them)."""
    return list(map(_RAW, variables))


@contextlib.contextmanager
def lent(variables: Sequence[nnx.Variable], values: Sequence[Any]) -> Iterator[None]:
    """``variables`` hold ``values`` and accept writes from the current trace for the duration."""
    saved = [(v._raw_value, v._trace_state) for v in variables]
    try:
        for v, x in zip(variables, values):
            object.__setattr__(v, "_raw_value", x)
            object.__setattr__(v, "_trace_state", tracers.TraceState())
        yield
    finally:
        for v, (x, state) in zip(variables, saved):
            object.__setattr__(v, "_raw_value", x)
            object.__setattr__(v, "_trace_state", state)


@contextlib.contextmanager
def lent_optimizer_state(optimizers: Sequence[Any], states: Sequence[Any]) -> Iterator[None]:
    """Each optimizer's state is the matching value of ``states`` for the duration (written to the optimizer's
    state box, as ``runtime.bound_step`` writes it: assigning ``opt_state`` is a Cell attribute write, which NNX
    refuses from inside a trace)."""
    saved = [opt._box.state for opt in optimizers]
    try:
        for opt, state in zip(optimizers, states):
            opt._box.state = state
        yield
    finally:
        for opt, state in zip(optimizers, saved):
            opt._box.state = state


class _Source:
    """The user's function and the original Cells it closes over: static data of the objective Cell (NNX keeps a
    plain object as part of the structure and never enters it)."""

    def __init__(self, fn: Callable[..., Any], has_aux: bool, cells: tuple[Cell, ...], loose: tuple, name: str):
        self.fn, self.has_aux, self.cells, self.loose, self.name = fn, has_aux, cells, loose, name


class StepObjective(Cell):
    """``fn``'s loss as a Cell holding ``cells`` and ``loose`` (the Cells and the other Variables the step
    reaches): the network of a functional step's program, as a ``WithLossCell`` is ``Model.train``'s. With
    ``has_aux`` the loss is ``fn``'s first output."""

    def __init__(self, fn: Callable[..., Any], has_aux: bool, cells: Sequence[Cell], loose: Sequence[nnx.Variable],
                 name: str):
        super().__init__(auto_prefix=False)
        self.cells = list(cells)  # lists, not attributes: the user's Cells and Parameters keep their names, scopes
        self.loose = list(loose)
        self._source = _Source(fn, has_aux, tuple(cells), tuple(loose), name)

    def __call__(self, *inputs: Any) -> Any:
        return self.construct(*inputs)  # no scope of its own: the function's Cells are scoped from Default

    def construct(self, *inputs: Any) -> Any:
        source = self._source
        out = self._run(inputs)
        loss = out[0] if source.has_aux else out
        if jnp.ndim(loss) != 0:
            raise JitError(source.name, f"the differentiated function returns a loss of shape {jnp.shape(loss)}; a "
                           "compiled step differentiates a scalar loss: reduce it (ops.ReduceMean, loss.mean()) "
                           "in the function")
        return loss

    def auxiliary(self, *inputs: Any) -> tuple:
        """The auxiliary outputs of a ``has_aux`` function (the graph ``functional.step`` evaluates for them)."""
        return tuple(self._run(inputs)[1:])

    def _run(self, inputs: tuple) -> Any:
        source = self._source
        mine, originals = variables_of(self.cells, self.loose), variables_of(source.cells, source.loose)
        with lent(originals, read(mine)):
            out = for_trace(source.fn)(*inputs)  # its `if`s on traced values compiled (ir.control_flow)
            for var, value in zip(mine, read(originals)):  # what the function wrote (statistics) to this copy
                object.__setattr__(var, "_raw_value", value)
        return out


def objective_cell(fn: Callable[..., Any], has_aux: bool, cells: Sequence[Cell], loose: Sequence[nnx.Variable],
                   name: str, fn_name: str) -> StepObjective:
    """A :class:`StepObjective` whose class is named after the differentiated function (``fn_name``): the planned
    graph and its dumps are named ``{fn_name}_train``, as ``Model.train``'s are after its loss network's class."""
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in fn_name) or "step"
    cls = type(ident if ident[0].isalpha() or ident[0] == "_" else f"_{ident}", (StepObjective,), {})
    return cls(fn, has_aux, cells, loose, name)
