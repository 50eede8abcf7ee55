"""Wrapper Cells: ``WithLossCell``, ``WithEvalCell``, ``TrainOneStepCell`` (MindSpore's ``nn.wrap``).

``TrainOneStepCell`` is graphpar's unit of training: calling it runs one optimizer step. In GRAPH_MODE the whole
step (forward, loss, gradients, update) is one compiled program, built by ``graphpar.compile`` for the parallel
mode in force and reused every step; in PYNATIVE_MODE the same step runs eagerly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphpar.nn.cell import Cell


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
            from graphpar.nn._mixed_precision import cast_tree

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
        self._program = None

    @property
    def program(self):
        """The compiled train program (built on first use from the current context)."""
        if self._program is None:
            from graphpar.compile.pipeline.program import PipelineProgram, wants_pipeline
            from graphpar.compile.runtime.program import TrainProgram

            # pipeline_stages > 1: one program per stage on its own devices (compile/pipeline/program.py)
            self._program = PipelineProgram(self) if wants_pipeline() else TrainProgram(self)
        return self._program

    def construct(self, *inputs: Any) -> Any:
        return self.program.run_step(inputs)

    def __call__(self, *inputs: Any) -> Any:
        return self.construct(*inputs)
