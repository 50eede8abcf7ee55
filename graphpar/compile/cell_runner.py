"""graphpar.compile's :class:`~graphpar.nn.runner.CellRunner`: how the user surface's Cell calls reach the engine.

``graphpar.nn`` sits below compile and declares what it needs in ``nn.runner``; this module implements it with the
engine's programs and the root ``graphpar/__init__.py`` registers it (``nn.runner.register_runner``).
"""

from __future__ import annotations

from typing import Any

from graphpar.compile.pipeline.program import PipelineProgram
from graphpar.compile.runtime.forward import run_compiled
from graphpar.compile.runtime.program import TrainProgram
from graphpar.compile.runtime.spmd_call import run_spmd
from graphpar.nn.cell import Cell
from graphpar.nn.runner import TrainStep
from graphpar.nn.wrap import TrainOneStepCell


class CompiledCellRunner:
    """Top-level Cell calls run once per rank (``runtime.spmd_call``) or as a compiled forward
    (``runtime.forward``); train cells run a :class:`TrainProgram` or, with pipeline stages, a
    :class:`PipelineProgram`."""

    def run_per_rank(self, cell: Cell, args: tuple, kwargs: dict) -> Any:
        return run_spmd(cell, args, kwargs)

    def run_compiled(self, cell: Cell, args: tuple, kwargs: dict) -> Any:
        return run_compiled(cell, args, kwargs)

    def train_program(self, train_cell: TrainOneStepCell) -> TrainStep:
        return TrainProgram(train_cell)

    def pipeline_program(self, train_cell: TrainOneStepCell) -> TrainStep:
        return PipelineProgram(train_cell)
