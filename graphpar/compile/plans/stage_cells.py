"""What the stage search found for a traced model (:class:`StageReport`) and where its plan puts each layer Cell: its ``pipeline_stage`` (and with interleaved 1F1B its
``pipeline_segment``) and ``recompute()``, found by the scopes the traced graph recorded. Shared by
``StageReport.apply`` (``stage_profile``) and the strategy file's ``load_pipeline_plan`` (``stage_file``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from graphpar._logging import notice_once
from graphpar.compile.plans.stage_experts import expert_split, layer_experts
from graphpar.errors import GraphparError
from graphpar.nn.cell import Cell
from graphpar.planner.stages.model import Cluster
from graphpar.planner.stages.report import stage_data, stage_text
from graphpar.planner.stages.schedules import chunk_layers
from graphpar.planner.stages.search import StageSearch


class StagePlanError(GraphparError, ValueError):
    """A stage plan that cannot be put on the network given (none was found, or the network is another one)."""


def cell_at(network: Cell, scope: str) -> Cell | None:
    """The Cell a scope names (``Default/network-WithLossCell/_backbone-GPT/0-Block``), searched from ``network``
    or a Cell inside it (a train cell holding the loss network): each segment names the shallowest descendant with
    that attribute name and class (a CellList's items are scoped under the Cell holding the list)."""
    level: list[Cell] = [network]
    cell = None
    for part in scope.split("/")[1:]:  # after Default/
        attr, _, cls = part.rpartition("-")
        cell = None
        while level and cell is None:
            cell = next((c for c in level if (c._scope_attr or "network") == attr and type(c).__name__ == cls), None)
            if cell is None:
                level = [g for c in level for g in c.name_cells().values()]
        if cell is None:
            return None
        level = list(cell.name_cells().values())
    return cell


def cell_chunks(scopes: Iterable[str], layers: tuple[int, ...], chunks: int) -> dict[str, tuple[int, int]]:
    """Each layer Cell's ``(pipeline_stage, pipeline_segment)``: the layer copies in model order handed to the
    chunks of ``schedules.chunk_layers`` (one chunk per stage without interleaving: segment 0)."""
    scopes, out, k = list(scopes), {}, 0
    for stage, segment, n in chunk_layers(layers, chunks):
        out.update({scope: (stage, segment) for scope in scopes[k:k + n]})
        k += n
    return out


def put_stages(network: Cell, stage_of: dict[str, tuple[int, int]], recompute: set[int], who: str) -> None:
    """Each layer Cell (by scope) of ``network`` on its ``(stage, segment)`` (a segment is set only where a
    stage holds several: interleaved 1F1B), recomputed where its stage is in ``recompute``; a scope that names no
    Cell of ``network`` is refused (the plan was made for another network)."""
    cells = {scope: cell_at(network, scope) for scope in stage_of}
    missing = [scope for scope, cell in cells.items() if cell is None]
    if missing:
        raise StagePlanError(f"{who}({type(network).__name__}): no Cell at {missing[0]}; apply the plan to "
                             "the network it was made for (the loss network plan_for_devices traced)")
    interleaved = any(segment for _, segment in stage_of.values())
    for scope, cell in cells.items():
        cell.pipeline_stage, segment = stage_of[scope]
        if interleaved:
            cell.pipeline_segment = segment
        if cell.pipeline_stage in recompute:
            cell.recompute()


@dataclasses.dataclass(frozen=True)
class StageReport:
    """What the stage search found for a traced model: the search (best plan and runners-up), the layer it
    repeated, and the CPU time profiling and searching took."""

    search: StageSearch
    layers: Any  # stage_profile.ModelLayers: the repeated layer found in the trace
    cell_scopes: tuple[str, ...]  # each layer copy's Cell scope, in model order
    layer_scope: str
    n_layers: int
    global_batch: int
    cluster: Cluster
    profile_s: float
    search_s: float

    def text(self) -> str:
        return stage_text(self)

    def apply(self, network: Cell) -> dict[str, Any]:
        """Put the chosen plan on ``network`` (the loss network planned): each layer Cell's ``pipeline_stage`` by
        the layers per stage, ``recompute()`` on the layers of the stages the plan recomputes (the ops outside the layers follow their neighbours' stages, as
        ``compile.pipeline.stage_split`` places them). Returns the ``set_auto_parallel_context`` settings to run it
        with (``pipeline_stages``, ``pipeline_config``); wrap the network in ``PipelineCell(network,
        plan.shape.micro_batches)``."""
        best = self.search.best
        if best is None:
            raise StagePlanError("StageReport.apply: the stage search found no plan within the memory budget "
                                 f"({self.search.fitted} of {self.search.priced} shapes fit): raise "
                                 "max_device_memory or plan for more devices")
        put_stages(network, cell_chunks(self.cell_scopes, best.layers, best.shape.chunks),
                   {i for i, r in enumerate(best.recompute) if r}, "StageReport.apply")
        mp = expert_split(layer_experts(self.layers.cell), best.shape.tp)
        if best.shape.ep > 1 or mp > 1:  # construction arguments of the MoE, not context settings: said, not set
            notice_once("stages:expert_parallel", f"the stage plan chose expert_parallel={best.shape.ep} and the "
                        f"experts split model_parallel={mp} ways: build the MoE layers with MoEParallelConfig("
                        f"data_parallel={best.shape.dp}, model_parallel={mp}, expert_parallel={best.shape.ep}) "
                        "(apply() sets the pipeline only; the MoE's strategies are fixed when it is built)")
        return {"pipeline_stages": best.shape.stages,
                "pipeline_config": {"pipeline_scheduler": best.shape.schedule,
                                    "pipeline_interleave": best.shape.chunks > 1}}

    def data(self) -> dict[str, Any]:
        return stage_data(self)
