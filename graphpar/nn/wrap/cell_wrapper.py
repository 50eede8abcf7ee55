"""Wrapper Cells: ``WithLossCell``, ``WithEvalCell``, ``TrainOneStepCell`` (MindSpore's ``nn.wrap.cell_wrapper``,
which also holds ``_VirtualDatasetCell``, ``PipelineCell``, ``MicroBatchInterleaved`` and ``GradAccumulationCell``:
re-exported here from their own modules).

``TrainOneStepCell`` is graphpar's unit of training: calling it runs one optimizer step. In GRAPH_MODE the whole
step (forward, loss, gradients, update) is one compiled program, built by ``graphpar.compile`` (through the runner
it registers, ``nn.runner``) for the parallel mode in force and reused every step; in PYNATIVE_MODE the same step
runs eagerly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphpar import _context
from graphpar.nn._mixed_precision import cast_tree
from graphpar.nn.cell import Cell
from graphpar.nn.grad_accumulation import GradAccumulationCell as GradAccumulationCell
from graphpar.nn.micro_interleaved import MicroBatchInterleaved as MicroBatchInterleaved
from graphpar.nn.pipeline_cell import PipelineCell as PipelineCell
from graphpar.nn.pipeline_cell import wants_pipeline
from graphpar.nn.runner import TrainStep, runner
from graphpar.nn.wrap.virtual_dataset import _VirtualDatasetCell as _VirtualDatasetCell


class WithLossCell(Cell):
    """``WithLossCell(backbone, loss_fn)``: ``loss_fn(backbone(*data), label)``; the last input is the label."""

    def __init__(self, backbone: Cell, loss_fn: Cell):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self._loss_fn = loss_fn

    def construct(self, *inputs: Any) -> Any:
        if len(inputs) < 2:
            raise TypeError(f"WithLossCell takes the network's inputs and a label; got {len(inputs)} input(s)")
        out = self._backbone(*inputs[:-1])
        return self._loss_fn(out, inputs[-1])

    @property
    def backbone_network(self) -> Cell:
        return self._backbone


class WithEvalCell(Cell):
    """``WithEvalCell(network, loss_fn)`` → ``(loss, outputs, label)``."""

    def __init__(self, network: Cell, loss_fn: Cell | None = None, add_cast_fp32: bool = False):
        super().__init__(auto_prefix=False)
        self._network = network
        self._loss_fn = loss_fn
        self.add_cast_fp32 = bool(add_cast_fp32)

    def construct(self, *inputs: Any) -> Any:
        outputs = self._network(*inputs[:-1])
        label = inputs[-1]
        if self.add_cast_fp32:  # a low-precision network (amp O2/O3): outputs and label as float32
            outputs, label = cast_tree(outputs, np.float32), cast_tree(label, np.float32)
        loss = self._loss_fn(outputs, label) if self._loss_fn is not None else None
        return loss, outputs, label


class TrainOneStepCell(Cell):
    """``TrainOneStepCell(network, optimizer, sens=None)``: one call = one training step; returns the loss.

    ``network`` computes the loss from the batch (usually a ``WithLossCell``). ``sens`` scales the gradient as
    MindSpore's sensitivity does (the gradient of ``sens * loss``).
    """

    scale_update: Any = None  # a loss-scale update Cell (TrainOneStepWithLossScaleCell, nn/loss_scale.py)

    def __init__(self, network: Cell, optimizer: Any, sens: float | None = None):
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer
        self.sens = 1.0 if sens is None else float(sens)
        self._programs = _TrainPrograms()

    @property
    def program(self) -> TrainStep:
        """The compiled train program for the settings in force, chosen on every call and built on first use.

        With ``pipeline_stages > 1``: a pipelined program (one program per stage on its own devices,
        ``compile/pipeline/program.py``), which reads the settings when it is built, so one per settings
        (``_context.compile_key()``). Otherwise the one-program step (``compile/runtime/program.py``), which itself
        plans once per settings. Whether to pipeline is ``pipeline_stages``, a setting: while no setting was assigned
        (``_context.settings_revision()``), the training loop's next call takes the last one-program step without
        reading them (a microsecond of each step's Python, where graphpar's whole step costs about five)."""
        programs, revision = self._programs, _context.settings_revision()
        if programs.revision == revision:
            return programs.current
        key = _context.compile_key() if wants_pipeline() else None
        program = programs.by_key.get(key)
        if program is None:
            program = runner().pipeline_program(self) if key is not None else runner().train_program(self)
            programs.by_key[key] = program
        if key is None:
            programs.current, programs.revision = program, revision
        return program

    def construct(self, *inputs: Any) -> Any:
        return self.program.run_step(inputs)

    def __call__(self, *inputs: Any) -> Any:
        if type(self).construct is not TrainOneStepCell.construct:  # a subclass's own step (loss scaling, ...)
            return self.construct(*inputs)
        # the training loop's call: ``program``'s first test and ``construct`` written out in this one frame
        programs = self._programs
        if programs.revision == _context.settings_revision():
            return programs.current.run_step(inputs)
        return self.program.run_step(inputs)


class _TrainPrograms:
    """A ``TrainOneStepCell``'s train programs by settings key (``None``: the one-program step). A plain object, so
    NNX keeps it as static data of the Cell rather than a dict it would walk (its keys do not sort)."""

    def __init__(self) -> None:
        self.by_key: dict[tuple | None, TrainStep] = {}
        self.current: TrainStep | None = None  # the one-program step, chosen last under settings ``revision``
        self.revision = -1
