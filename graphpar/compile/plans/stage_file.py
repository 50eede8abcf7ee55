"""The searched pipeline in the strategy file (``strategy_ckpt_config={"save_file": ...}``): MindSpore's per-op
``"stage"`` field and ``current_stage``, and a ``graphpar.pipeline`` section with the plan's settings and the stage
of every layer Cell.

The ops' strategies are the whole graph's intra-op plan on all devices (what the one-stage search chose); the
pipeline section records what the stage search chose besides: stage count, micro-batches, schedule, layers per
stage and each layer Cell's stage, recompute per stage, optimizer sharding, the tensor group and the layer's
intra-op plan on it. A training run does not read the section yet: it pipelines as ``pipeline_stages`` and each
Cell's ``pipeline_stage`` say."""

from __future__ import annotations

from typing import Any

from graphpar.ir.graph import Graph
from graphpar.planner import strategy_file
from graphpar.planner.optimizer_parallel import OptimizerParallelConfig


def pipeline_strategy(graph: Graph, report: Any, devices: int, pctx: Any, trainable: set[str]) -> dict[str, Any]:
    """The strategy file's JSON object for the planned ``graph`` and the stage search ``report`` (a best plan)."""
    config = pctx.strategy_ckpt_config or {}
    data = strategy_file.from_graph(graph, devices, pctx.parallel_mode, trainable,
                                    bool(config.get("only_trainable_params", True)), False,
                                    OptimizerParallelConfig.from_context(pctx))
    best = report.search.best
    stage_of = report.layers.stage_of(graph, best.layers)
    for nid, key in strategy_file.node_keys(graph).items():
        if key in data["parallel_strategy_item"]:
            data["parallel_strategy_item"][key]["stage"] = stage_of.get(nid, 0)
            data["graphpar"]["strategies"][key]["stage"] = stage_of.get(nid, 0)
    scopes = report.cell_scopes
    cells, k = {}, 0
    for stage, n in enumerate(best.layers):
        cells.update({scope: stage for scope in scopes[k:k + n]})
        k += n
    data["graphpar"]["pipeline"] = {**report.data()["chosen"], "cell_stages": cells}
    return data


def save_pipeline(graph: Graph, report: Any, devices: int, pctx: Any, trainable: set[str]) -> str | None:
    """Write :func:`pipeline_strategy` to the configured ``save_file`` (None when none is set or nothing fits)."""
    path = (pctx.strategy_ckpt_config or {}).get("save_file")
    if not path or report is None or report.search.best is None:
        return None
    strategy_file.write(path, pipeline_strategy(graph, report, devices, pctx, trainable))
    return path
