"""The pipeline-stage search (AUTO_PARALLEL with ``auto_pipeline=True``): stage count and layer assignment,
micro-batches, schedule, tensor x data parallel per stage, recompute, optimizer sharding; see :mod:`.search`."""

from graphpar.planner.stages.model import Cluster, EdgeCost, LayerCost, Shape, reductions_per_step
from graphpar.planner.stages.search import StagePlan, StageSearch, assign, best_fixed, search_stages

__all__ = ["Cluster", "EdgeCost", "LayerCost", "Shape", "StagePlan", "StageSearch", "assign", "best_fixed",
           "reductions_per_step", "search_stages"]
