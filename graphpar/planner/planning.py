"""Planning: one function from a traced graph and a :class:`PlanRequest` to the planned graph, through one visible
list of named passes per mode.

:func:`plan_graph` is the only way graphpar plans: a program's step or forward (``compile.staging.orchestrate``),
a replica's graph (``compile.plans.replica_split``), a pipeline's graph (``compile.pipeline.program``) and a dry
run (``compile.plans.dry_run``) each describe what they want as a request and call it. Names drive the timers
(``graph.plan.pass_seconds``) and the dumps. Each pass is ``(Graph, PlanContext) -> Graph`` and never mutates its
input; the graph's decisions are its frozen ``graph.plan`` (``ir.graph.GraphPlan``). The SEMI_AUTO / AUTO / HYBRID
lists begin with ``read_hints`` (each ``shard()`` hint read once), ``choose_mesh`` and ``dataset_layouts``; the
context later passes read is remade from the graph's plan after a pass decides the mesh or the dataset layouts.

With ``GRAPHPAR_CHECK_PASSES=1`` (the test suite sets it) every pass's result is checked before the next pass runs
(``passes.verify.check_pass``): the layouts decided so far are valid, the pass left its input and the graph's
structure alone and undecided no node; a violation is a :class:`PlanInvariantError` naming the pass. Off, nothing
is checked or copied, and the timers time the passes alone either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from graphpar import _env
from graphpar._context import ParallelMode
from graphpar.ir.graph import Graph
from graphpar.planner.passes.context import PlanContext, PlanRequest
from graphpar.planner.passes.defaults import default_strategies, set_data_parallel_strategies
from graphpar.planner.passes.hints import apply_hints, read_hints
from graphpar.planner.passes.mesh_choice import choose_mesh, dataset_layouts
from graphpar.planner.passes.parameters import place_parameters
from graphpar.planner.passes.propagate import propagate
from graphpar.planner.passes.recorded import apply_strategy_file, check_strategy_file
from graphpar.planner.passes.redistributions import report_redistributions
from graphpar.planner.passes.verify import PassInput, check_pass, verify
from graphpar.planner.search.search_pass import search
from graphpar.planner.search.settings import SEARCH_MODES

Pass = Callable[[Graph, PlanContext], Graph]

SEMI_AUTO: tuple[tuple[str, Pass], ...] = (
    ("read_hints", read_hints),
    ("choose_mesh", choose_mesh),
    ("dataset_layouts", dataset_layouts),
    ("apply_hints", apply_hints),
    ("apply_strategy_file", apply_strategy_file),
    ("default_strategies", default_strategies),
    ("place_parameters", place_parameters),
    ("check_strategy_file", check_strategy_file),
    ("verify", verify),
    ("report_redistributions", report_redistributions),
)

SHARDING_PROPAGATION: tuple[tuple[str, Pass], ...] = (
    ("read_hints", read_hints),
    ("choose_mesh", choose_mesh),
    ("dataset_layouts", dataset_layouts),
    ("apply_hints", apply_hints),
    ("apply_strategy_file", apply_strategy_file),
    ("set_data_parallel_strategies", set_data_parallel_strategies),
    ("propagate", propagate),
    ("default_strategies", default_strategies),
    ("place_parameters", place_parameters),
    ("check_strategy_file", check_strategy_file),
    ("verify", verify),
    ("report_redistributions", report_redistributions),
)

# AUTO_PARALLEL with search_mode "recursive_programming" / "dynamic_programming": hints and a strategy file are
# constraints, the search decides every other op (planner/search/)
SEARCH: tuple[tuple[str, Pass], ...] = (
    ("read_hints", read_hints),
    ("choose_mesh", choose_mesh),
    ("dataset_layouts", dataset_layouts),
    ("apply_hints", apply_hints),
    ("apply_strategy_file", apply_strategy_file),
    ("set_data_parallel_strategies", set_data_parallel_strategies),
    ("search", search),
    ("place_parameters", place_parameters),
    ("check_strategy_file", check_strategy_file),
    ("verify", verify),
)

# STAND_ALONE / DATA_PARALLEL: the graph runs whole on each device, on the request's one-device mesh
DATA_PARALLEL: tuple[tuple[str, Pass], ...] = (
    ("default_strategies", default_strategies),
    ("place_parameters", place_parameters),
)


def passes_for(ctx: PlanContext) -> tuple[tuple[str, Pass], ...]:
    if ctx.mode == ParallelMode.AUTO_PARALLEL and ctx.search_mode == "sharding_propagation":
        return SHARDING_PROPAGATION
    if ctx.mode == ParallelMode.AUTO_PARALLEL and ctx.search_mode in SEARCH_MODES:
        return SEARCH
    if ctx.mode in (ParallelMode.SEMI_AUTO_PARALLEL, ParallelMode.AUTO_PARALLEL, ParallelMode.HYBRID_PARALLEL):
        return SEMI_AUTO
    return DATA_PARALLEL


def plan_graph(graph: Graph, request: PlanRequest, passes: Sequence[tuple[str, Pass]] | None = None) -> Graph:
    """``graph`` planned as ``request`` asks, through ``passes`` (default: the mode's, :func:`passes_for`), each
    pass timed by name."""
    graph = graph.with_plan(mesh=request.mesh, purpose=request.purpose, parallel_mode=request.parallel_mode,
                            note=request.note,
                            optimizer_slots=request.optimizer_slots)  # slots: what the memory terms read
    ctx = PlanContext.of(request, graph.plan)
    timings = {}
    checked = _env.pass_checks_enabled()
    for name, fn in passes_for(ctx) if passes is None else passes:
        given = PassInput.of(graph) if checked else None
        started = time.perf_counter()
        result = fn(graph, ctx)
        timings[name] = time.perf_counter() - started
        ctx = ctx.on(result.plan)  # choose_mesh / dataset_layouts decide what later passes read
        if given is not None:
            check_pass(name, given, result, ctx)
        graph = result
    return graph.with_plan(pass_seconds=timings)
