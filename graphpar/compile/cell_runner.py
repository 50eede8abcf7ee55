"""graphpar.compile's :class:`~graphpar.nn.runner.CellRunner`: how the user surface's Cell calls reach the engine.

``graphpar.nn`` sits below compile and declares what it needs in ``nn.runner``; this module implements it with the
engine's programs and the root ``graphpar/__init__.py`` registers it (``nn.runner.register_runner``).
"""

from __future__ import annotations

from typing import Any

from graphpar.compile.functional.jit import JitFunction, step_of
from graphpar.compile.pipeline.program import PipelineProgram
from graphpar.compile.runtime.forward import run_compiled
from graphpar.compile.runtime.per_rank_train import PerRankTrainProgram, wants_per_rank_training
from graphpar.compile.runtime.program import TrainProgram
from graphpar.compile.runtime.spmd_call import run_spmd
from graphpar.nn.cell import Cell
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.nn.runner import TrainStep
from graphpar.nn.wrap import TrainOneStepCell


def holds_optimizer(cell: Cell) -> bool:
    """Whether ``cell`` holds an optimizer below it: then its call is a training step, not a forward (an
    optimizer's own call, ``opt(grads)``, is an update)."""
    return not isinstance(cell, Optimizer) and any(isinstance(sub, Optimizer) for _, sub in cell.cells_and_names())


class CompiledCellRunner:
    """Top-level Cell calls run once per rank (``runtime.spmd_call``) or as a compiled forward
    (``runtime.forward``), or, for a Cell holding an optimizer, as a compiled functional step
    (``functional.jit``); train cells run a :class:`TrainProgram`, with pipeline stages a
    :class:`PipelineProgram`, or in STAND_ALONE with collectives in the network a :class:`PerRankTrainProgram`."""

    def run_per_rank(self, cell: Cell, args: tuple, kwargs: dict) -> Any:
        return run_spmd(cell, args, kwargs)

    def __init__(self) -> None:
        self._steps: dict[int, tuple[Cell, JitFunction]] = {}

    def run_compiled(self, cell: Cell, args: tuple, kwargs: dict) -> Any:
        if not holds_optimizer(cell):
            return run_compiled(cell, args, kwargs)
        # a training step written as a Cell (MindSpore 1.x's custom TrainOneStepCell: GradOperation and the
        # optimizer in construct) is compiled as a functional step (graphpar.jit of its construct); a Cell that is
        # only part of one (gradients accumulated by hand, the optimizer applied by another Cell) runs as written
        found = self._steps.get(id(cell))
        if found is None or found[0] is not cell:
            found = self._steps[id(cell)] = (cell, step_of(cell.construct))
        return found[1](*args, **kwargs)

    def train_program(self, train_cell: TrainOneStepCell) -> TrainStep:
        # STAND_ALONE with collective ops in construct (MindSpore's manual parallel): one step per rank
        if wants_per_rank_training(train_cell.network):
            return PerRankTrainProgram(train_cell)
        return TrainProgram(train_cell)

    def pipeline_program(self, train_cell: TrainOneStepCell) -> TrainStep:
        return PipelineProgram(train_cell)
