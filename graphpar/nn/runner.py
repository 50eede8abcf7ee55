"""How a Cell call reaches the engine: the :class:`CellRunner` that ``graphpar.compile`` registers.

nn is the user surface and sits below compile in graphpar's layers, yet three of its calls are run by the engine:

* a top-level call of a Cell holding collective ops runs once per rank (``compile.runtime.spmd_call``);
* any other top-level call in GRAPH_MODE runs the Cell's planned, compiled forward (``compile.runtime.forward``),
  as MindSpore compiles a Cell call in graph mode;
* a ``TrainOneStepCell`` call runs its compiled train program (``compile.runtime.program``, or
  ``compile.pipeline.program`` with ``pipeline_stages > 1``).

So nn says here what it needs (:class:`CellRunner`) and decides *when* (:func:`top_level_call`); the engine
implements it (``graphpar.compile.cell_runner``) and the root ``graphpar/__init__.py`` registers that
implementation with :func:`register_runner`. Importing any part of graphpar runs the root ``__init__`` first, so the
runner is always registered before a Cell can be called; :func:`runner` raises :class:`RunnerMissingError` if it
is not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import jax

from graphpar import _context
from graphpar.errors import GraphparError
from graphpar.ops.comm_ops import Collective
from graphpar.ops.composite import active_step


class TrainStep(Protocol):
    """A compiled train program of a ``TrainOneStepCell``: one optimizer step per call."""

    def run_step(self, inputs: Any) -> jax.Array:
        """One training step on a global batch; returns the loss."""
        ...

    def run_steps(self, stacked_inputs: Any) -> jax.Array:
        """Sink mode: one step per leading index of ``stacked_inputs``; returns the per-step losses."""
        ...


class CellRunner(Protocol):
    """What nn needs from the engine. ``cell`` is an ``nn.Cell`` (typed ``Any`` here: this module sits below
    ``nn.cell``, which imports it)."""

    def run_per_rank(self, cell: Any, args: tuple, kwargs: dict) -> Any:
        """``cell(*args, **kwargs)`` once per rank of the job (a Cell holding collective ops)."""
        ...

    def run_compiled(self, cell: Any, args: tuple, kwargs: dict) -> Any:
        """``cell(*args, **kwargs)`` at top level in GRAPH_MODE: the compiled forward."""
        ...

    def train_program(self, train_cell: Any) -> TrainStep:
        """A new one-program train step for ``train_cell`` (a ``TrainOneStepCell``)."""
        ...

    def pipeline_program(self, train_cell: Any) -> TrainStep:
        """A new pipelined train step for ``train_cell`` (``pipeline_stages > 1``), built for the settings in
        force."""
        ...


class RunnerMissingError(GraphparError, RuntimeError):
    """A Cell was run before ``graphpar.compile`` registered its runner (``graphpar/__init__.py`` does)."""


_runner: CellRunner | None = None


def register_runner(cell_runner: CellRunner) -> None:
    """Install the engine's runner (called once, by the root ``graphpar/__init__.py``)."""
    global _runner
    _runner = cell_runner


def runner() -> CellRunner:
    """The registered runner; :class:`RunnerMissingError` if none is."""
    if _runner is None:
        raise RunnerMissingError("no Cell runner is registered: graphpar.nn runs compiled Cells through "
                                 "graphpar.compile, which `import graphpar` registers; import graphpar (not only a "
                                 "module of it loaded by file path) before calling a Cell")
    return _runner


def needs_spmd(cell: Any) -> bool:
    """True when ``cell``'s tree holds a collective op (then a top-level call runs once per rank)."""
    for _, sub in cell.cells_and_names():
        for value in vars(sub).values():
            if isinstance(value, Collective):
                return True
            if isinstance(value, (list, tuple)) and any(isinstance(v, Collective) for v in value):
                return True
    return False


def top_level_call(cell: Any, args: tuple, kwargs: dict) -> Callable[[Any, tuple, dict], Any] | None:
    """How a top-level call (not inside another Cell's trace) runs, or None to run ``construct`` as written.

    A Cell holding collective ops runs once per rank; in GRAPH_MODE any other Cell runs its planned, compiled
    forward, as MindSpore compiles a Cell call in graph mode. PYNATIVE_MODE, and calls made while tracing
    (arguments are tracers), run inline. A call the step being run answers (``ops.composite.StepTrace.computes``)
    is its: the differentiated Cell inside a compiled step (its loss is the gradient's, as MindSpore's compiler
    merges the two), the optimizer of a pipelined functional step (its stages' updates).
    """
    step = active_step()
    if step is not None and step.computes(cell, args, kwargs):
        return step.forward
    if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves((args, kwargs))):
        return None
    if needs_spmd(cell):
        return runner().run_per_rank
    if _context.current().mode == _context.GRAPH_MODE:
        return runner().run_compiled
    return None
