"""Dumps of a pipelined train step: each stage's graph under its own ranks, and the schedule with every transfer.

With ``save_graphs``, for every stage ``s`` and every rank ``r`` of its device group:

* ``rank_{r}/step_parallel_begin_{NNNN}.ir`` and ``rank_{r}/18_execute_{NNNN}.ir``: the stage's part of the
  micro-batch graph, as for any plan (the execute dump reads the collectives of the stage's forward, backward and
  update programs; groups are global ranks);
* ``rank_{r}/pipeline_schedule_{NNNN}.ir`` (same ``NNNN``): the schedule (each stage's order and the time steps of
  the whole pipeline), and one ``Send`` line per activation or activation gradient this rank's stage sends in one
  step, one ``Receive`` line per one it receives, micro-batch by micro-batch, with MindSpore's
  ``sr_tag``/``src_rank``/``dest_rank`` style attributes. :func:`read_schedule` parses it back (``graphpar ir summary`` shows it).

Each transfer carries its raw sizes (``bytes``: the whole tensor, ``device_bytes``: one destination device's
shard) and ``wire_bytes``, the project's unit of collective bytes (``planner.wire.wire_bytes``): a transfer between two
equal-sized device groups is a point-to-point permutation in which every device sends one destination shard, so it
counts as a ``CollectivePermute`` of ``device_bytes``. The dump ends with this rank's totals per step, raw and wire.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphpar import _context
from graphpar._context import AutoParallelContext
from graphpar.dump.format import FORMAT_VERSION, mesh_text
from graphpar.dump.model import DumpError
from graphpar.dump.writer import EXECUTE_STAGE, PlanDescription, dump_index, write_begin, write_execute
from graphpar.ir.graph import Graph
from graphpar.planner import strategy_file
from graphpar.planner.wire import wire_bytes


@dataclass(frozen=True)
class PipelineJob:
    """What the pipeline dumps say about the job: its parallel settings, its devices (rank ``r`` on
    ``devices[r]``), the stage count, the micro-batches per step and the schedule's name. Each stage runs on
    ``per_stage`` consecutive ranks."""

    pctx: AutoParallelContext
    devices: tuple[Any, ...]
    n_stages: int
    micro_size: int
    scheduler: str
    segments: int = 1  # virtual stages per device group (pipeline_interleave)

    @property
    def per_stage(self) -> int:
        return len(self.devices) // self.n_stages

    def stage_plan(self) -> PlanDescription:
        """What the generic writers read about the plan of a stage: the job's settings, rank count and devices."""
        return PlanDescription(self.pctx, len(self.devices), self.devices)


@dataclass(frozen=True)
class StageDescription:
    """One stage as its dumps show it: its index, its ranks, its part of the micro-batch graph."""

    stage: int
    ranks: tuple[int, ...]
    graph: Graph


@dataclass(frozen=True)
class ScheduleDescription:
    """A planned pipeline as its dumps show it: the planned micro-batch graph, its stages, each stage's order of
    actions (``"F0"``: the forward of micro-batch 0, ``"B0"`` its backward, ``"W0"`` its weight gradient when the
backward is split; ``"F0s1"``: in segment 1, when stages hold several), the time steps of the whole pipeline
    (``(stage, action)`` pairs), and the stage of every node (by id) and of every parameter (by name)."""

    graph: Graph
    stages: tuple[StageDescription, ...]
    orders: tuple[tuple[str, ...], ...]
    ticks: tuple[tuple[tuple[int, str], ...], ...]
    node_stage: dict[int, int]
    param_stage: dict[str, int]
    chunks: tuple[tuple[int, int], ...] = ()  # with virtual stages: (stage, segment) of each chunk in model order
    idle: tuple[float, ...] = ()  # per stage, the schedule's idle fraction under the cost model ``costs``
    costs: str = ""


@dataclass(frozen=True)
class ScheduleMeasure:
    """What the runtime measured in the first step, for the schedule dump: every transfer between stages (a dict
    per transfer: pass, micro, stages, value, producer, scope, dtype, shape, bytes, device_bytes), the transfers of
    the last step, and per stage the most micro-batches (and residual bytes on one device) held at once."""

    transfer_log: Sequence[dict[str, Any]]
    transfers_last_step: int
    peak_live_micro_batches: Sequence[int]
    peak_residual_bytes: Sequence[int]


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else str(ranks[0])


def stage_note(job: PipelineJob, stage: int, segment: int, ranks: Sequence[int]) -> str:
    """The ``# note`` line of a stage's (or a stage's segment's) dumps (the compile layer puts it on the stage's
    graph before dumping)."""
    part = "this stage's part" if job.segments == 1 else f"segment {segment} of {job.segments}: this virtual stage's part"
    return (f"pipeline stage {stage} of {job.n_stages} on ranks {_ranks_text(ranks)}: {part} "
            f"of one micro-batch (micro_size {job.micro_size}, scheduler {job.scheduler})")


def maybe_dump_begin(built: ScheduleDescription, job: PipelineJob) -> None:
    if not _context.current().save_graphs:
        return
    for st in built.stages:
        write_begin(st.graph, job.stage_plan(), _context.current().save_graphs_path, st.ranks)


def maybe_dump_execute(built: ScheduleDescription, job: PipelineJob, measured: ScheduleMeasure,
                       hlo: Sequence[str | None]) -> None:
    """The execute dumps (``hlo[s]``: the compiled HLO of stage ``s``'s programs; None for a stage another process
    runs, which that process dumps) and the schedule dump."""
    if not _context.current().save_graphs:
        return
    directory = _context.current().save_graphs_path
    for st in built.stages:
        if hlo[st.stage] is None:
            continue
        write_execute(st.graph, job.stage_plan(), hlo[st.stage], directory, st.ranks, rank_offset=st.ranks[0],
                      program_devices=len(st.ranks))
        text = schedule_text(built, job, measured, st)
        for rank in st.ranks:
            path = Path(directory) / f"rank_{rank}" / f"pipeline_schedule_{dump_index(st.graph):04d}.ir"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("{RANK}", str(rank)))


def schedule_text(built: ScheduleDescription, job: PipelineJob, stats: ScheduleMeasure, st: StageDescription) -> str:
    n = job.n_stages
    lines = ["# graphpar IR dump: pipeline_schedule",
             f"# format: graphpar-ir {FORMAT_VERSION}",
             f"# graph: {st.graph.name}  purpose: train",
             f"# rank: {{RANK}} of {len(job.devices)}  ({_chunk_text(built, st.stage)} of {n}, ranks "
             f"{_ranks_text(st.ranks)})",
             f"# pipeline_stages: {n}  micro_size: {job.micro_size}  scheduler: {job.scheduler}",
             f"# mesh per stage: {mesh_text(built.graph.plan.mesh)}",
             f"# execute: {EXECUTE_STAGE:02d}_execute_{dump_index(st.graph):04d}.ir", ""]
    if built.chunks:
        lines.append(f"# virtual stages: {job.segments} segments per stage; virtual stage (chunk) c in model order "
                     "runs on (stage, segment): " + " ".join(f"{c}=({s},{g})" for c, (s, g) in enumerate(built.chunks)))
    if built.idle:
        lines.append(f"# idle fraction (schedule; costs {built.costs}): "
                     + " ".join(f"stage{s}={x:.3f}" for s, x in enumerate(built.idle)))
    lines.append("# stage orders")
    for s, order in enumerate(built.orders):
        peak = max(_live(order))
        lines.append(f"stage {s} ranks {_ranks_text(built.stages[s].ranks)}: {' '.join(order)}  "
                     f"# peak live micro-batches: {peak}")
    lines.append("")
    lines.append("# time steps (stage:action)")
    for t, tick in enumerate(built.ticks):
        lines.append(f"t{t}: " + " ".join(f"{stage}:{action}" for stage, action in tick))
    lines.append("")
    lines.append("# transfers between stages in one step (activations forward, their gradients backward)")
    ranks = [chunk.ranks for chunk in built.stages]
    here = st.stage
    totals = {"Send": [0, 0.0], "Receive": [0, 0.0]}
    for k, t in enumerate(stats.transfer_log):
        if here not in (t["src_stage"], t["dst_stage"]):
            continue  # this rank neither sends nor receives it
        src, dst = ranks[t["src_stage"]], ranks[t["dst_stage"]]
        attrs = {"micro": t["micro"], "pass": t["pass"], "src_stage": t["src_stage"], "dest_stage": t["dst_stage"],
                 "src_rank": src, "dest_rank": dst, "sr_tag": k, "bytes": t["bytes"],
                 "device_bytes": t["device_bytes"], "wire_bytes": transfer_wire_bytes(t["device_bytes"]),
                 "producer": t["producer"]}
        tensor = f"<Tensor[{t['dtype']}], {tuple(t['shape'])}>"
        total = totals["Send" if t["src_stage"] == here else "Receive"]
        total[0] += t["device_bytes"]
        total[1] += attrs["wire_bytes"]
        if t["src_stage"] == here:
            lines.append(f"%t{k} = Send(%{t['value']}) {{instance name: send_{t['pass']}_{k}}} primitive_attrs: "
                         f"{json.dumps(attrs)} : ({tensor}) -> ()  # scope: ({t['scope']})")
        else:
            lines.append(f"%r{k} = Receive() {{instance name: receive_{t['pass']}_{k}}} primitive_attrs: "
                         f"{json.dumps(attrs)} : () -> ({tensor})  # scope: ({t['scope']})")
    for kind, (raw, wire) in totals.items():
        lines.append(f"# {kind} bytes per step per device: raw {raw} wire {wire:g}")
    lines.append(f"# activation transfers per step (all stages): {stats.transfers_last_step}")
    lines.append("# peak live micro-batches (measured): "
                 + " ".join(f"stage{s}={c}" for s, c in enumerate(stats.peak_live_micro_batches)))
    lines.append("# peak residual bytes per device (measured): "
                 + " ".join(f"stage{s}={c}" for s, c in enumerate(stats.peak_residual_bytes)))
    return "\n".join(lines) + "\n"


def _chunk_text(built: ScheduleDescription, chunk: int) -> str:
    if not built.chunks:
        return f"stage {chunk}"
    stage, segment = built.chunks[chunk]
    return f"virtual stage {chunk}: segment {segment} of stage {stage}"


def transfer_wire_bytes(device_bytes: int) -> float:
    """Wire bytes one device sends for one stage-to-stage transfer (see the module docstring)."""
    return wire_bytes("CollectivePermute", device_bytes, 2)


def _live(order: Sequence[str]) -> list[int]:
    """Residuals held along an order: a forward adds one; the backward releases it (the weight gradient, when the
    backward is split)."""
    release = "W" if any(action.startswith("W") for action in order) else "B"
    live, out = 0, [0]
    for action in order:
        live += 1 if action.startswith("F") else -1 if action.startswith(release) else 0
        out.append(live)
    return out


_ORDER = re.compile(r"^stage (\d+) ranks (\S+): (.*?)  # peak live micro-batches: (\d+)$")


def read_schedule(path: str | Path) -> dict[str, Any]:
    """The schedule dump at ``path`` as a dict: settings, per-stage orders, time steps, this rank's sends and
    receives (one per transfer), the transfer count of all stages and the measured peaks."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise DumpError(str(path), f"cannot read: {exc.strerror}") from None
    out: dict[str, Any] = {"file": str(p), "orders": {}, "ticks": [], "sends": [], "receives": [],
                           "transfers_per_step": None, "peak_live": {}, "peak_residual_bytes": {}, "totals": {}}
    for no, line in enumerate(text.splitlines(), 1):
        if (m := re.match(r"^# pipeline_stages: (\d+)  micro_size: (\d+)  scheduler: (\S+)$", line)):
            out.update(stages=int(m.group(1)), micro_size=int(m.group(2)), scheduler=m.group(3))
        elif (m := re.match(r"^# idle fraction \(schedule; costs (.*?)\): (.*)$", line)):
            out["idle"] = {int(k[5:]): float(v) for k, v in (x.split("=") for x in m.group(2).split())}
            out["costs"] = m.group(1)
        elif (m := re.match(r"^# virtual stages: (\d+) segments per stage; .*?: (.*)$", line)):
            out["segments"] = int(m.group(1))
            out["chunks"] = [tuple(int(v) for v in x.split("=")[1].strip("()").split(",")) for x in m.group(2).split()]
        elif (m := _ORDER.match(line)):
            out["orders"][int(m.group(1))] = {"ranks": m.group(2), "actions": m.group(3).split(),
                                              "peak_live": int(m.group(4))}
        elif (m := re.match(r"^t(\d+): (.*)$", line)):
            out["ticks"].append(m.group(2).split())
        elif line.startswith("%t") or line.startswith("%r"):
            m = re.match(r"^%([tr])\d+ = (Send|Receive)\(.*?primitive_attrs: (\{.*?\}) : ", line)
            if m is None:
                raise DumpError(str(path), f"line {no}: not a Send/Receive line: {line[:80]}")
            out["sends" if m.group(1) == "t" else "receives"].append(json.loads(m.group(3)))
        elif (m := re.match(r"^# (Send|Receive) bytes per step per device: raw (\d+) wire (\S+)$", line)):
            out["totals"][m.group(1)] = {"bytes": int(m.group(2)), "wire_bytes": float(m.group(3))}
        elif (m := re.match(r"^# activation transfers per step \(all stages\): (\d+)$", line)):
            out["transfers_per_step"] = int(m.group(1))
        elif (m := re.match(r"^# peak live micro-batches \(measured\): (.*)$", line)):
            out["peak_live"] = {int(k[5:]): int(v) for k, v in (x.split("=") for x in m.group(1).split())}
        elif (m := re.match(r"^# peak residual bytes per device \(measured\): (.*)$", line)):
            out["peak_residual_bytes"] = {int(k[5:]): int(v) for k, v in (x.split("=") for x in m.group(1).split())}
    if "stages" not in out:
        raise DumpError(str(path), "not a pipeline schedule dump (no '# pipeline_stages:' header)")
    return out


def schedule_for(dump_path: str | None, index: int | None) -> dict[str, Any] | None:
    """The schedule dump next to a begin/execute dump of graph ``index``, if the graph is a pipeline stage."""
    if dump_path is None or index is None:
        return None
    path = Path(dump_path).parent / f"pipeline_schedule_{index:04d}.ir"
    return read_schedule(path) if path.exists() else None


def maybe_save_strategy(built: ScheduleDescription, job: PipelineJob, trainable: set[str]) -> None:
    """The strategy file of a pipelined plan: MindSpore's JSON with each op's and each parameter's stage."""
    config = job.pctx.strategy_ckpt_config or {}
    path = config.get("save_file")
    if not path:
        return
    graph = built.graph
    data = strategy_file.from_graph(graph, job.per_stage, job.pctx.parallel_mode, trainable,
                                    bool(config.get("only_trainable_params", True)))
    keys = strategy_file.node_keys(graph)
    for node_id, key in keys.items():
        if key in data["parallel_strategy_item"]:
            data["parallel_strategy_item"][key]["stage"] = built.node_stage[node_id]
    extra = data["graphpar"]
    extra["pipeline_stages"] = job.n_stages
    extra["micro_size"] = job.micro_size
    extra["stage_ranks"] = [list(st.ranks) for st in built.stages]
    for name, layout in extra["layouts"].items():
        layout["pipeline_stage"] = built.param_stage.get(name, 0)
    for name, layout in data["parallel_layout_item"].items():
        layout["pipeline_stage"] = built.param_stage.get(name, 0)
    strategy_file.write(path, data)
