"""Pass ``search``: AUTO_PARALLEL's cost-model search (search_mode "recursive_programming" / "dynamic_programming").

Reads: the strategies already decided (``shard()`` hints and a loaded strategy file ran first: they are constraints,
each such node has exactly its strategy as candidate), rules, shapes, the dataset layouts, ``ctx.search``
(:class:`~.settings.SearchSettings`: memory budget, hardware). Adds: a strategy on every undecided node with
provenance ``searched``, and ``graph.plan.search`` (a ``search.record.SearchRecord``): per node the chosen
strategy's cost breakdown and the best two alternatives with theirs (each priced with every other op as planned),
plus the problem's size and timings.

Both MindSpore search modes run the same search here: an exact ILP (:mod:`.ilp`) over candidates (:mod:`.candidates`)
with repeated layers sharing one solution (:mod:`.layers`). MindSpore's recursive_programming wants a power-of-two
device count; this search takes any mesh. Errors: :class:`~.settings.MemoryBudgetError` when no plan fits the
budget, naming the smallest need found.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

from graphpar._logging import notice_once
from graphpar.errors import StrategyError

from graphpar.ir.graph import Graph, Node, Provenance
from graphpar.planner.dims import shapes_of
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.passes.elementwise_follow import follow_consumers
from graphpar.planner.search.costs import Cost
from graphpar.planner.search.ilp import Infeasible, Solution, solve_ilp
from graphpar.planner.search.record import SearchRecord
from graphpar.planner.search.sapp_partition import partition_matmuls
from graphpar.planner.search.problem import Pricer, Problem, build_problem, describe
from graphpar.planner.search.settings import MemoryBudgetError, SearchSettings
from graphpar.planner.strategy import NodeStrategy, from_hint


@dataclass(frozen=True)
class Choice:
    """A strategy of one op and what it costs in the plan (this op's collectives and compute, and the
    redistributions on its edges with every neighbour as planned)."""

    strategy: tuple[tuple[int, ...], ...]
    cost: Cost
    time: float


@dataclass(frozen=True)
class NodeRecord:
    chosen: Choice
    alternatives: tuple[Choice, ...]


def _smallest_need(problem: Problem, settings: SearchSettings) -> tuple[float, list[str]]:
    """The smallest per-device memory of any plan (an ILP minimising memory), and the ops that dominate it."""
    solution = solve_ilp(problem, None, settings.time_limit, minimize="memory")
    parts = []
    for g, var in enumerate(problem.variables):
        if var.nodes:
            node = problem.graph.nodes[var.nodes[0]]
            parts.append((var.unary[solution.choice[g]].memory_bytes, f"{node.instance_name} ({node.scope})"))
    parts.sort(key=lambda p: -p[0])
    return problem.memory_of(solution.choice), [f"{name} {m / 1024 ** 2:.3g}MB" for m, name in parts[:3]]


def _neighbourhood(node: Node, graph: Graph, ctx: PlanContext, pricer: Pricer, chosen: dict[int, NodeStrategy],
                   storage: dict[int, tuple]) -> tuple:
    """The layouts around ``node`` as planned: per input the layout it arrives in (None: a Parameter stored as this
    op reads it), per output the layouts its consumers read."""
    ins = []
    for vid in node.inputs:
        value = graph.values[vid]
        if not value.is_array or not value.shape:
            ins.append(None)
        elif value.producer is not None:
            producer = graph.nodes[value.producer]
            ins.append(pricer.outs(chosen[producer.id])[producer.outputs.index(vid)])
        elif value.kind == "param":
            ins.append(storage.get(vid))
        else:
            ins.append(ctx.input_specs.get(vid, tuple(() for _ in value.shape)))
    outs = []
    for vid in node.outputs:
        outs.append(tuple((pricer.kept(c, k), pricer.ins(chosen[c.id])[k]) for c, k in graph.consumers(vid)
                          if c.id != node.id) if graph.values[vid].is_array else ())
    return tuple(ins), tuple(outs)


def _local_cost(node: Node, strategy: NodeStrategy, var: int, index: int, around: tuple, pricer: Pricer) -> Cost:
    """This op's cost under ``strategy`` with its neighbours as planned: own collectives and compute, and the
    redistributions on its edges."""
    cost = pricer.op(var, node, index, strategy)
    ins, outs = pricer.specs(strategy)
    for k, (vid, src, dst) in enumerate(zip(node.inputs, around[0], ins)):
        if src is not None:
            cost = cost + pricer.redistribution(vid, src, dst, pricer.kept(node, k))
    for vid, src, readers in zip(node.outputs, outs, around[1]):
        for kept, dst in readers:
            cost = cost + pricer.redistribution(vid, src, dst, kept)
    return cost


def _records(problem: Problem, solution: Solution, ctx: PlanContext, pricer: Pricer,
             chosen: dict[int, NodeStrategy], storage: dict[int, tuple]) -> dict[int, NodeRecord]:
    graph, hw = problem.graph, problem.hw
    out: dict[int, NodeRecord] = {}
    cache: dict[tuple, NodeRecord] = {}  # copies of a layer with the same surroundings share their record
    for g, var in enumerate(problem.variables):
        if var.param is not None or var.choices.fixed:
            continue
        for nid in var.nodes:
            node = graph.nodes[nid]
            around = _neighbourhood(node, graph, ctx, pricer, chosen, storage)
            record = cache.get((g, around))
            if record is None:
                priced = []
                for i, s in enumerate(var.choices.strategies):
                    c = _local_cost(node, s, g, i, around, pricer)
                    priced.append((c.time(hw), i, c))
                mine = priced[solution.choice[g]]
                alts = sorted((p for p in priced if p[1] != solution.choice[g]), key=lambda p: (p[0], p[1]))[:2]
                record = NodeRecord(
                    Choice(var.choices.strategies[mine[1]].in_strategy(), mine[2], mine[0]),
                    tuple(Choice(var.choices.strategies[i].in_strategy(), c, t) for t, i, c in alts))
                cache[(g, around)] = record
            out[nid] = record
    return out


def _interfered_sapp(graph: Graph, ctx: PlanContext, settings: SearchSettings) -> Graph:
    """Under ``MS_INTERFERED_SAPP=1``: every 2-D MatMul without a strategy takes SAPP's partition around the ops
    that have one (:mod:`.sapp_partition`), a constraint of the search as a ``shard()`` hint is."""
    updates = {}
    detail = "recursive_programming: SAPP's MatMul partition (MS_INTERFERED_SAPP=1)"
    for nid, hint in partition_matmuls(graph, ctx.mesh.n_devices, settings.rp_matmul_mem_coef).items():
        node = graph.nodes[nid]
        ins, outs = shapes_of(node, graph)
        try:
            strategy = from_hint(node, ctx.dims(node, graph), hint, ins, outs, ctx.mesh)
        except StrategyError as error:
            notice_once(f"sapp-matmul:{node.instance_name}:{node.scope}",
                        f"op '{node.instance_name}': SAPP's MatMul partition {hint} does not fit this mesh "
                        f"({error.reason}); graphpar searches its strategy", logging.INFO)
            continue
        updates[nid] = {"strategy": strategy, "provenance": Provenance("searched", detail=detail)}
    return graph.with_annotations(updates) if updates else graph


def search(graph: Graph, ctx: PlanContext) -> Graph:
    settings: SearchSettings = ctx.search if ctx.search is not None else SearchSettings()
    started = time.perf_counter()
    if settings.interfered_sapp:
        graph = _interfered_sapp(graph, ctx, settings)
    pricer = Pricer(graph, ctx)
    problem = build_problem(graph, ctx, settings.hardware, pricer)
    built = time.perf_counter()
    try:
        solution = solve_ilp(problem, settings.memory_budget, settings.time_limit)
    except Infeasible:
        need, largest = _smallest_need(problem, settings)
        raise MemoryBudgetError(settings.memory_budget, need, largest) from None
    solved = time.perf_counter()
    chosen: dict[int, NodeStrategy] = {}
    storage: dict[int, tuple] = {}
    for g, var in enumerate(problem.variables):
        if var.param is not None:
            storage[var.param] = var.layouts[solution.choice[g]]
            continue
        for nid in var.nodes:
            chosen[nid] = var.strategy(solution.choice[g])
    updates = {}
    tied = {nid: len(var.nodes) for var in problem.variables for nid in var.nodes}
    for node in graph.node_list():
        g = problem.var_of[node.id]
        var = problem.variables[g]
        if node.strategy is not None:
            continue
        if var.choices.fixed:
            updates[node.id] = {"strategy": chosen[node.id], "provenance": var.choices.provenance}
            continue
        detail = f"{ctx.search_mode}, {solution.method}" + (
            f", shared by {tied[node.id]} copies of its layer" if tied[node.id] > 1 else "")
        updates[node.id] = {"strategy": chosen[node.id], "provenance": Provenance("searched", detail=detail)}
    followed = {nid: u["provenance"] for nid, u in updates.items() if not problem.variables[
        problem.var_of[nid]].choices.fixed}
    before = dict(chosen)
    follow_consumers(graph, ctx, chosen, followed)  # set_algo_parameters(elementwise_op_strategy_follow)
    for nid, strategy in chosen.items():
        if strategy is not before[nid]:
            updates[nid] = {"strategy": strategy, "provenance": followed[nid]}
    records = _records(problem, solution, ctx, pricer, chosen, storage)
    for nid, record in records.items():
        if nid in updates:
            prov = updates[nid]["provenance"]
            breakdown = {**record.chosen.cost.as_dict(), "time": record.chosen.time}
            updates[nid]["provenance"] = dataclasses.replace(prov, breakdown=breakdown)
    out = graph.with_annotations(updates)
    return out.with_plan(search=SearchRecord(
        records=records, storage=storage, objective_s=solution.objective, optimal=solution.optimal, gap=solution.gap,
        memory_bytes=problem.memory_of(solution.choice), budget=settings.memory_budget, problem=describe(problem),
        build_s=built - started, solve_s=solved - built, total_s=time.perf_counter() - started,
        hardware=settings.hardware.name))
