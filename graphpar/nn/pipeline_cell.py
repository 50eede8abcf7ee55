"""``PipelineCell(network, micro_size, stage_config=None, segment_config=None)``: MindSpore's micro-batch wrapper for pipeline parallel.

The wrapped network (usually a ``WithLossCell``) runs on ``micro_size`` equal slices of the batch (dimension 0 of
every input) and the result is the **sum** of the micro-batches' outputs, as MindSpore's ``PipelineCell`` adds
them; gradients are therefore summed over micro-batches too. With ``pipeline_stages > 1`` the train step does not
call :meth:`construct`: ``graphpar.compile.pipeline.program`` runs each stage's part of ``network`` per micro-batch
on its own devices, with exactly these semantics. With ``pipeline_stages == 1`` (or in ``STAND_ALONE``) the Cell
runs as written, which is the unpipelined reference.

``stage_config`` (MindSpore 2.x) maps Cell names, as ``network.cells_and_names()`` gives them
(``_backbone.layer1``), to stages; it sets those Cells' ``pipeline_stage``. ``segment_config`` (MindSpore 2.7) maps
them to segments (virtual stages, with ``pipeline_interleave``) the same way; it sets their ``pipeline_segment``.

:class:`PipelineError` and :func:`wants_pipeline` live here, with the Cell, so that the surface refuses a bad
micro-batch split and picks the pipelined train step without importing the engine (``compile.pipeline`` uses both).
"""

from __future__ import annotations

from typing import Any

import jax

from graphpar import _context
from graphpar.errors import GraphparError
from graphpar.nn.cell import Cell


class PipelineError(GraphparError, ValueError):
    """A pipeline configuration that cannot run: ``culprit`` (a Cell path, op, Parameter, stage or setting),
    ``reason`` and ``fix``."""

    def __init__(self, culprit: str, reason: str, fix: str = ""):
        self.culprit, self.reason, self.fix = culprit, reason, fix
        super().__init__(f"pipeline parallel: {culprit}: {reason}" + (f"; {fix}" if fix else ""))


def wants_pipeline() -> bool:
    """True when the context asks for pipeline stages (the train step is then a pipelined program, one per
    stage)."""
    return _context.get_auto_parallel_context("pipeline_stages") > 1


class Forwarding(Cell):
    """A Cell that only calls a network it wraps (MindSpore 2.6's ``AutoParallel`` around a Cell): ``forwarded``
    is that network (None when it wraps no Cell). A pipelined train step looks through it for the ``PipelineCell``
    (:func:`pipeline_cell_of`), as MindSpore's ``Model(AutoParallel(Pipeline(net_with_loss, ...)))`` does."""

    @property
    def forwarded(self) -> Cell | None:
        return None


def pipeline_cell_of(network: Cell) -> Cell:
    """The Cell a pipelined train step trains: ``network``, or what the :class:`Forwarding` Cells around it wrap."""
    while isinstance(network, Forwarding) and network.forwarded is not None:
        network = network.forwarded
    return network


class PipelineCell(Cell):
    """Split the batch into ``micro_size`` micro-batches and sum ``network``'s outputs over them."""

    def __init__(self, network: Cell, micro_size: int, stage_config: dict[str, int] | None = None,
                 segment_config: dict[str, int] | None = None):
        super().__init__(auto_prefix=False)
        if not isinstance(network, Cell):
            raise TypeError(f"For 'PipelineCell', the argument 'network' must be a Cell, but got "
                            f"{type(network).__name__}")
        if not isinstance(micro_size, int) or isinstance(micro_size, bool):
            raise TypeError(f"For 'PipelineCell', the argument 'micro_size' must be an int, but got "
                            f"{type(micro_size).__name__}")
        if micro_size <= 0:
            raise ValueError(f"For 'PipelineCell', the argument 'micro_size' must be larger than 0, but got "
                             f"{micro_size}")
        self.network = network
        self.micro_size = micro_size
        if stage_config:
            _apply_stage_config(network, stage_config)
        if segment_config:
            _apply_stage_config(network, segment_config, "segment")

    def construct(self, *inputs: Any) -> Any:
        for i, x in enumerate(inputs):
            check_micro_split(i, x.shape, self.micro_size)
        total = None
        for k in range(self.micro_size):
            micro = [jax.lax.slice_in_dim(x, k * (x.shape[0] // self.micro_size),
                                          (k + 1) * (x.shape[0] // self.micro_size)) for x in inputs]
            out = self.network(*micro)
            total = out if total is None else total + out
        return total


def check_micro_split(index: int, shape: tuple[int, ...], micro_size: int) -> None:
    """Refuse an input whose batch dimension ``micro_size`` does not divide, naming the input."""
    if not shape or shape[0] % micro_size:
        raise PipelineError(f"input {index} of PipelineCell (shape {tuple(shape)})",
                            f"its batch dimension is not divisible by micro_size={micro_size}",
                            f"use a batch size that is a multiple of {micro_size}")


def _apply_stage_config(network: Cell, stage_config: dict[str, int], what: str = "stage") -> None:
    cells = dict(network.cells_and_names())
    unknown = [name for name in stage_config if name not in cells]
    if unknown:
        names = [n for n in cells if n][:8]
        raise KeyError(f"For 'PipelineCell', {what}_config names Cells that the network does not have: {unknown}; "
                       f"Cell names are as network.cells_and_names() gives them, e.g. {names}")
    for name, value in stage_config.items():
        if what == "stage":
            cells[name].pipeline_stage = value
        else:
            cells[name].pipeline_segment = value


class Pipeline(PipelineCell):
    """MindSpore 2.x's name (``mindspore.parallel.nn.Pipeline``) for :class:`PipelineCell`."""
