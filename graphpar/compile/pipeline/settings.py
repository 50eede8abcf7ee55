"""What a pipelined train step reads of the settings, checked, as one value per compile key.

``PipelineProgram`` (``compile.pipeline.program``) is built on ``runtime.skeleton.Program``, which snapshots a
program's settings once per compile key; :func:`read_pipeline_settings` is that snapshot for a pipeline, refusing
the settings pipeline parallelism does not run under with a :class:`PipelineError` that names the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax

from graphpar import _context
from graphpar._context import PYNATIVE_MODE, AutoParallelContext, ParallelMode
from graphpar._logging import notice_once
from graphpar.communication.devices import job_devices
from graphpar.compile.pipeline.schedule import VirtualLayout
from graphpar.compile.pipeline.stage_split import PipelineError
from graphpar.dump.pipeline import PipelineJob
from graphpar.nn.pipeline_cell import PipelineCell

_PIPELINE_MODES = (ParallelMode.SEMI_AUTO_PARALLEL, ParallelMode.AUTO_PARALLEL, ParallelMode.HYBRID_PARALLEL)


@dataclass(frozen=True)
class PipelinePlan:
    """The plan of a pipelined job as ``Model`` and the dump writers read it (a ``dump.writer.DumpedPlan``): its
    devices and settings, and how many global batches it draws per step (one stage's devices read the global
    batch, as its data-parallel split)."""

    pctx: AutoParallelContext
    devices: tuple[jax.Device, ...]
    n_stages: int
    name: ClassVar[str] = "pipeline"
    pynative: ClassVar[bool] = False
    first_rank: ClassVar[int] = 0

    @property
    def n(self) -> int:
        return len(self.devices)

    @property
    def draws(self) -> int:
        return len(self.devices) // self.n_stages


@dataclass(frozen=True)
class PipelineSettings:
    """What a pipelined step reads of the settings (once per compile key, ``runtime.skeleton``), checked: its plan,
    and the job as its dumps describe it (stages, micro-batches, schedule)."""

    plan: PipelinePlan
    job: PipelineJob

    @property
    def layout(self) -> VirtualLayout:
        """Which device group runs each virtual stage (one per stage without interleaving)."""
        return VirtualLayout(self.job.n_stages, self.job.segments, self.job.scheduler == "zero_bubble_v")


def read_pipeline_settings(pipe: PipelineCell) -> PipelineSettings:
    """The settings in force for pipelining ``pipe``, checked."""
    pctx = _context.current_parallel()
    n_stages = pctx.pipeline_stages
    if pctx.parallel_mode not in _PIPELINE_MODES:
        raise PipelineError(f"parallel_mode={pctx.parallel_mode!r}",
                            f"pipeline_stages={n_stages} runs in SEMI_AUTO_PARALLEL or AUTO_PARALLEL (as in "
                            "MindSpore)", "set_auto_parallel_context(parallel_mode='semi_auto_parallel')")
    if pctx.enable_parallel_optimizer:
        raise PipelineError("enable_parallel_optimizer=True", f"the parallel optimizer is not combined with "
                            f"pipeline_stages={n_stages} yet (each stage keeps whole optimizer state)",
                            "use enable_parallel_optimizer=False with pipeline stages")
    if _context.current().mode == PYNATIVE_MODE:
        raise PipelineError("set_context(mode=PYNATIVE_MODE)", "pipeline parallel runs in GRAPH_MODE only (as "
                            "in MindSpore)", "use set_context(mode=GRAPH_MODE)")
    devices = tuple(job_devices(pctx.device_num))
    n = len(devices)
    if n % n_stages:
        raise PipelineError(f"device_num={n}", f"is not divisible by pipeline_stages={n_stages}",
                            f"use a device_num that is a multiple of {n_stages}")
    micro_size = pipe.micro_size
    if micro_size < n_stages:
        raise PipelineError(f"PipelineCell micro_size={micro_size}",
                            f"is smaller than pipeline_stages={n_stages} (MindSpore requires micro_size >= "
                            "stages)", f"use micro_size >= {n_stages}")
    scheduler = pctx.pipeline_config["pipeline_scheduler"]
    segments = _segments(pipe, pctx.pipeline_config["pipeline_interleave"], scheduler, n_stages, micro_size)
    job = PipelineJob(pctx, devices, n_stages, micro_size, scheduler, segments)
    return PipelineSettings(PipelinePlan(pctx, devices, n_stages), job)


def _segments(pipe: PipelineCell, interleave: bool, scheduler: str, n_stages: int, micro_size: int) -> int:
    """How many segments (virtual stages) each stage holds: one more than the largest ``pipeline_segment`` set on
    the network's Cells, with ``pipeline_interleave`` (segments set without it are refused by ``stage_split``)."""
    if not interleave:
        return 1
    segments = 1 + max((cell.pipeline_segment or 0 for _, cell in pipe.network.cells_and_names()), default=0)
    if segments == 1 and scheduler == "1f1b":
        notice_once("pipeline-interleave-one-segment", "pipeline_interleave=True: no Cell sets pipeline_segment, so "
                    "each stage holds one segment and interleaved 1F1B is plain 1F1B; set pipeline_segment on the "
                    "Cells of each stage's later layers for virtual stages")
    if scheduler == "zero_bubble_v" and segments != 2:
        raise PipelineError("pipeline_scheduler='zero_bubble_v'", f"places each stage's Cells in 2 segments (a V: "
                            f"segment 0 on stages 0..{n_stages - 1}, segment 1 back on stages {n_stages - 1}..0), "
                            f"but the network's Cells use {segments}",
                            "set pipeline_segment=0 on the first half of the network's Cells and 1 on the second")
    if scheduler == "1f1b" and segments > 1 and micro_size % n_stages:
        raise PipelineError(f"PipelineCell micro_size={micro_size}", f"interleaved {scheduler} runs micro-batches in "
                            f"rounds of pipeline_stages={n_stages}", f"use a micro_size that is a multiple of "
                            f"{n_stages}")
    return segments
