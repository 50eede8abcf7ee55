"""The searched pipeline in the strategy file (``strategy_ckpt_config={"save_file": ...}``), and a training run
reading it back (:func:`load_pipeline_plan`).

The file is what a pipelined run with the searched settings would save (``dump.pipeline.maybe_save_strategy``):
the micro-batch graph's intra-op plan on one stage's ``tp x dp`` devices (``device_num``), the searched layer plan
forced on every layer copy (``stage_strategies``), MindSpore's per-op ``"stage"``, and in the ``graphpar``
section ``pipeline_stages``, ``micro_size`` and a ``pipeline`` object with what the stage search chose besides:
micro-batches, schedule and chunks per stage (interleaved 1F1B: ``pipeline_interleave``), layers per stage and
each layer Cell's stage and segment, recompute per stage, optimizer sharding, sequence parallel (the recorded
strategies of the layer copies carry its token split: ``stage_sequence``), the tensor group and the predicted
time and memory per stage.

A training run reads it with ``load_pipeline_plan(path).apply(loss_net)``: each layer Cell's ``pipeline_stage``
(with interleaving its ``pipeline_segment``) and ``recompute()`` are set, and the returned ``set_auto_parallel_context`` settings pipeline the run as searched and
load the file (``strategy_ckpt_config={"load_file": path}``), so every stage plans exactly the recorded strategies;
the network is wrapped in ``nn.PipelineCell(loss_net, plan.micro_batches)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from graphpar._context import ParallelMode
from graphpar._logging import notice_once
from graphpar.compile.plans.stage_cells import StagePlanError, cell_chunks, put_stages
from graphpar.compile.plans.stage_strategies import stage_plan
from graphpar.ir.graph import Graph
from graphpar.nn.cell import Cell
from graphpar.planner import strategy_file
from graphpar.planner.optimizer_parallel import OptimizerParallelConfig


def pipeline_strategy(network: Cell, graph: Graph, report: Any, pctx: Any, trainable: set[str],
                      slots: Any = None) -> dict[str, Any]:
    """The strategy file's JSON object for the stage search ``report`` (a best plan) of ``network`` (``graph``: its
    global-batch trace)."""
    config = pctx.strategy_ckpt_config or {}
    best = report.search.best
    devices = best.shape.tp * best.shape.dp
    planned, layers = stage_plan(network, graph, report, pctx.dataset_strategy, slots)
    data = strategy_file.from_graph(planned, devices, ParallelMode.AUTO_PARALLEL, trainable,
                                    bool(config.get("only_trainable_params", True)), False,
                                    OptimizerParallelConfig.from_context(pctx))
    stage_of = layers.stage_of(planned, best.layers, best.shape.chunks)
    for nid, key in strategy_file.node_keys(planned).items():
        if key in data["parallel_strategy_item"]:
            data["parallel_strategy_item"][key]["stage"] = stage_of.get(nid, 0)
            data["graphpar"]["strategies"][key]["stage"] = stage_of.get(nid, 0)
    chunks = cell_chunks(report.cell_scopes, best.layers, best.shape.chunks)
    data["graphpar"]["pipeline_stages"] = best.shape.stages
    data["graphpar"]["micro_size"] = best.shape.micro_batches
    data["graphpar"]["pipeline"] = {**report.data()["chosen"],
                                    "cell_stages": {scope: st for scope, (st, _) in chunks.items()},
                                    "cell_segments": {scope: seg for scope, (_, seg) in chunks.items()}}
    return data


def save_pipeline(network: Cell, graph: Graph, report: Any, pctx: Any, trainable: set[str],
                  slots: Any = None) -> str | None:
    """Write :func:`pipeline_strategy` to the configured ``save_file`` (None when none is set or nothing fits)."""
    path = (pctx.strategy_ckpt_config or {}).get("save_file")
    if not path or report is None or report.search.best is None:
        return None
    strategy_file.write(path, pipeline_strategy(network, graph, report, pctx, trainable, slots))
    return path


@dataclass(frozen=True)
class SearchedPipeline:
    """The stage search's plan as a strategy file records it (module docstring)."""

    path: str
    stages: int
    micro_batches: int
    schedule: str
    cell_stages: dict[str, int]
    recompute: tuple[bool, ...]
    optimizer_shard: bool
    expert_parallel: int
    stage_memory: tuple[float, ...]  # the search's prediction per stage (bytes per device)
    cell_segments: dict[str, int] | None = None  # interleaved 1F1B: each layer Cell's pipeline_segment
    chunks: int = 1  # segments (virtual stages) per stage: > 1 runs interleaved 1F1B
    # Megatron's sequence parallel over the tensor group: the recorded layer strategies split the token regions
    sequence_parallel: bool = False

    @property
    def interleave(self) -> bool:
        return self.chunks > 1

    def apply(self, network: Cell) -> dict[str, Any]:
        """Put the plan on ``network`` (the loss network it was searched for): each layer Cell's ``pipeline_stage``
        and ``recompute()``; returns the ``set_auto_parallel_context`` settings that run it (stage count, schedule,
        and the file as ``strategy_ckpt_config``'s ``load_file``)."""
        if self.optimizer_shard:
            raise StagePlanError(f"load_pipeline_plan({self.path!r}).apply: the plan shards the optimizer state, "
                                 "which pipelined training does not run yet (enable_parallel_optimizer is refused "
                                 "with pipeline_stages); search again with max_device_memory raised so a plan "
                                 "without it fits")
        segments = self.cell_segments or {}
        put_stages(network, {scope: (st, segments.get(scope, 0)) for scope, st in self.cell_stages.items()},
                   {i for i, r in enumerate(self.recompute) if r},
                   f"load_pipeline_plan({self.path!r}).apply")
        if self.expert_parallel > 1:  # a construction argument of the MoE, not a context setting: said, not set
            notice_once("stages:expert_parallel:file", f"the strategy file {self.path} chose expert_parallel="
                        f"{self.expert_parallel}: build the MoE layers with MoEParallelConfig(expert_parallel="
                        f"{self.expert_parallel}) (apply() sets the pipeline only)")
        return {"pipeline_stages": self.stages,
                "pipeline_config": {"pipeline_scheduler": self.schedule, "pipeline_interleave": self.interleave},
                "strategy_ckpt_config": {"load_file": self.path}}


def load_pipeline_plan(path: str) -> SearchedPipeline:
    """The searched pipeline a strategy file records (written by ``graphpar plan`` / ``plan_for_devices`` with
    ``auto_pipeline=True`` and a ``save_file``); refused by name when the file has none."""
    strategy_file.read(path)  # a missing or malformed file is refused as any strategy file is
    with open(path) as fh:
        section = (json.load(fh).get("graphpar") or {}).get("pipeline")
    if not section:
        raise StagePlanError(f"load_pipeline_plan({path!r}): the strategy file records no searched pipeline (no "
                             "graphpar.pipeline section); write one with set_auto_parallel_context(auto_pipeline="
                             "True, strategy_ckpt_config={'save_file': ...}) and graphpar plan or plan_for_devices")
    return SearchedPipeline(path, int(section["pipeline_stages"]), int(section["micro_batches"]),
                            str(section["schedule"]), {k: int(v) for k, v in section["cell_stages"].items()},
                            tuple(r == "full" for r in section["recompute"]), bool(section["optimizer_shard"]),
                            int(section.get("expert_parallel", 1)), tuple(float(m) for m in
                                                                          section["stage_memory_bytes"]),
                            {k: int(v) for k, v in (section.get("cell_segments") or {}).items()},
                            int(section.get("chunks_per_stage", 1)),
                            bool(section.get("sequence_parallel", False)))
