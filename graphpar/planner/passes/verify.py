"""Pass ``verify``: the plan's invariants, checked before lowering.

Every node has a strategy; every split divides the dimension it splits; every mesh axis exists and is used at most
once per tensor; every parameter/input has a storage layout. A violation is a bug in a rule or pass, reported as
such (with the node), never silently lowered.

:func:`check_layouts` is the part of these invariants that holds after *any* pass, when only some nodes are decided:
the pipeline runs it between passes when ``GRAPHPAR_CHECK_PASSES`` is set (``planner.planning``; the test suite sets
it), so a broken layout is caught at the pass that made it, not at ``verify`` or in XLA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphpar.ir.graph import Graph, GraphPlan, Node
from graphpar.planner.passes.context import PlanContext


class PlanInvariantError(AssertionError):
    """A pass produced an invalid plan (a graphpar bug, not a user error). ``after_pass``: the pass whose result
    broke it, when the check between passes found it (None from ``verify``)."""

    def __init__(self, message: str, after_pass: str | None = None):
        super().__init__(message if after_pass is None else f"after pass '{after_pass}': {message}")
        self.after_pass = after_pass


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


def _where(node: Node) -> str:
    return f"node %{node.id} {node.kind} '{node.instance_name}' ({node.scope})"


def _check_node(node: Node, graph: Graph, ctx: PlanContext) -> None:
    """The layouts of a decided node's array inputs and outputs."""
    where = _where(node)
    for i, vid in enumerate(node.inputs):
        v = graph.values[vid]
        if v.is_array:
            _check_spec(node.strategy.input_spec(i), v.shape, ctx, f"{where} input {i}")
    for j, vid in enumerate(node.outputs):
        v = graph.values[vid]
        if v.is_array:
            _check_spec(node.strategy.output_spec(j), v.shape, ctx, f"{where} output {j}")


def check_layouts(graph: Graph, ctx: PlanContext) -> None:
    """The invariants that hold after any pass: every decided node has a provenance and valid layouts (right rank,
    known mesh axes, each at most once per tensor, splits that divide), and every storage layout recorded so far
    (``graph.plan.value_specs``) is the layout of a graph input and valid. Undecided nodes and inputs without a
    storage layout yet are fine (a later pass decides them; ``verify`` requires them)."""
    for node in graph.node_list():
        if node.strategy is None:
            continue
        if node.provenance is None:
            raise PlanInvariantError(f"{_where(node)} has a strategy but no provenance")
        _check_node(node, graph, ctx)
    inputs = set(graph.inputs)
    for vid, spec in graph.plan.value_specs.items():
        if vid not in inputs:
            raise PlanInvariantError(f"storage layout {spec} recorded for %{vid}, which is no graph input")
        if graph.values[vid].is_array:
            _check_spec(spec, graph.values[vid].shape, ctx, f"graph input %{vid}")


@dataclass(frozen=True)
class PassInput:
    """A pass's input graph and what it held when given (a shallow record: the objects, not copies), to see
    afterwards that the pass neither changed it in place nor undecided a node."""

    graph: Graph
    nodes: dict[int, Node]
    annotations: dict[int, tuple[Any, Any]]  # node id -> (strategy, provenance)
    plan: GraphPlan

    @staticmethod
    def of(graph: Graph) -> "PassInput":
        return PassInput(graph, dict(graph.nodes),
                         {nid: (n.strategy, n.provenance) for nid, n in graph.nodes.items()}, graph.plan)


def _check_untouched(given: PassInput) -> None:
    graph = given.graph
    if graph.nodes.keys() != given.nodes.keys() or any(graph.nodes[k] is not n for k, n in given.nodes.items()):
        raise PlanInvariantError("the pass replaced nodes of its input graph in place (a pass returns a new graph: "
                                 "Graph.with_annotations)")
    for nid, (strategy, provenance) in given.annotations.items():
        node = graph.nodes[nid]
        if node.strategy is not strategy or node.provenance is not provenance:
            raise PlanInvariantError(f"the pass changed {_where(node)} of its input graph in place (a pass returns "
                                     "a new graph: Graph.with_annotations)")
    if graph.plan is not given.plan:
        raise PlanInvariantError("the pass changed graph.plan of its input graph in place (a pass returns a new "
                                 "graph: Graph.with_plan)")


def _check_same_graph(given: Graph, result: Graph) -> None:
    if (result.order != given.order or result.nodes.keys() != given.nodes.keys() or result.inputs != given.inputs
            or result.outputs != given.outputs or result.values.keys() != given.values.keys()):
        raise PlanInvariantError("the pass changed the graph's structure (nodes, values, inputs or outputs); a "
                                 "planning pass only annotates")
    for nid, node in given.nodes.items():
        if node.strategy is not None and result.nodes[nid].strategy is None:
            raise PlanInvariantError(f"the pass took the strategy off {_where(node)}")


def check_pass(name: str, given: PassInput, result: Graph, ctx: PlanContext) -> None:
    """The invariants between passes, after pass ``name`` turned ``given`` into ``result``: its input is as it was
    given, the graph's structure is the same, every node decided before is still decided, and
    :func:`check_layouts` holds. Raises :class:`PlanInvariantError` naming the pass."""
    try:
        _check_untouched(given)
        _check_same_graph(given.graph, result)
        check_layouts(result, ctx)
    except PlanInvariantError as exc:
        raise PlanInvariantError(str(exc), after_pass=name) from None


def verify(graph: Graph, ctx: PlanContext) -> Graph:
    for node in graph.node_list():
        if node.strategy is None or node.provenance is None:
            raise PlanInvariantError(f"{_where(node)} has no strategy after planning")
        _check_node(node, graph, ctx)
    specs = graph.plan.value_specs
    for vid in graph.inputs:
        if vid not in specs:
            raise PlanInvariantError(f"graph input %{vid} ({graph.values[vid].name}) has no storage layout")
        if graph.values[vid].is_array:
            _check_spec(specs[vid], graph.values[vid].shape, ctx, f"graph input %{vid}")
    return graph
