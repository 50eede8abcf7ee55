"""Pass ``verify``: the plan's invariants, checked before lowering.

Every node has a strategy; every split divides the dimension it splits; every mesh axis exists and is used at most
once per tensor; every parameter/input has a storage layout. A violation is a bug in a rule or pass, reported as
such (with the node), never silently lowered.
"""

from __future__ import annotations

from graphpar.ir.graph import Graph
from graphpar.planner.passes.context import PlanContext


class PlanInvariantError(AssertionError):
    """A pass produced an invalid plan (a graphpar bug, not a user error)."""


def _check_spec(spec, shape, ctx: PlanContext, where: str) -> None:
    if len(spec) != len(shape):
        raise PlanInvariantError(f"{where}: layout {spec} has rank {len(spec)} for shape {shape}")
    seen = set()
    for axes, size in zip(spec, shape):
        for a in axes:
            if a not in ctx.mesh.names:
                raise PlanInvariantError(f"{where}: unknown mesh axis {a!r} in {spec}")
            if a in seen:
                raise PlanInvariantError(f"{where}: mesh axis {a!r} used twice in {spec}")
            seen.add(a)
        if size % ctx.mesh.size(axes):
            raise PlanInvariantError(f"{where}: split {ctx.mesh.size(axes)} does not divide {size} in {spec}")


def verify(graph: Graph, ctx: PlanContext) -> Graph:
    for node in graph.node_list():
        where = f"node %{node.id} {node.kind} '{node.instance_name}' ({node.scope})"
        if node.strategy is None or node.provenance is None:
            raise PlanInvariantError(f"{where} has no strategy after planning")
        for i, vid in enumerate(node.inputs):
            v = graph.values[vid]
            if v.is_array:
                _check_spec(node.strategy.input_spec(i), v.shape, ctx, f"{where} input {i}")
        for j, vid in enumerate(node.outputs):
            v = graph.values[vid]
            if v.is_array:
                _check_spec(node.strategy.output_spec(j), v.shape, ctx, f"{where} output {j}")
    specs = graph.meta.get("value_specs", {})
    for vid in graph.inputs:
        if vid not in specs:
            raise PlanInvariantError(f"graph input %{vid} ({graph.values[vid].name}) has no storage layout")
        if graph.values[vid].is_array:
            _check_spec(specs[vid], graph.values[vid].shape, ctx, f"graph input %{vid}")
    return graph
