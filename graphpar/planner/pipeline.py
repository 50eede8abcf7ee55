"""The parallel pipeline: one visible list of named passes per mode.

Names drive the timers (``graph.meta["pass_seconds"]``) and the dumps. Each pass is ``(Graph, PlanContext) ->
Graph`` and never mutates its input.

With ``GRAPHPAR_CHECK_PASSES=1`` (the test suite sets it) every pass's result is checked before the next pass runs
(``passes.verify.check_pass``): the layouts decided so far are valid, the pass left its input and the graph's
structure alone and undecided no node; a violation is a :class:`PlanInvariantError` naming the pass. Off, nothing
is checked or copied, and the timers time the passes alone either way.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from graphpar import _env
from graphpar._context import ParallelMode
from graphpar.ir.graph import Graph
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.passes.defaults import default_strategies
from graphpar.planner.passes.hints import apply_hints
from graphpar.planner.passes.parameters import place_parameters
from graphpar.planner.passes.propagate import propagate
from graphpar.planner.passes.recorded import apply_strategy_file, check_strategy_file
from graphpar.planner.passes.redistributions import report_redistributions
from graphpar.planner.passes.verify import PassInput, check_pass, verify
from graphpar.planner.search.search_pass import search
from graphpar.planner.search.settings import SEARCH_MODES

Pass = Callable[[Graph, PlanContext], Graph]

SEMI_AUTO: tuple[tuple[str, Pass], ...] = (
    ("apply_hints", apply_hints),
    ("apply_strategy_file", apply_strategy_file),
    ("default_strategies", default_strategies),
    ("place_parameters", place_parameters),
    ("check_strategy_file", check_strategy_file),
    ("verify", verify),
    ("report_redistributions", report_redistributions),
)

SHARDING_PROPAGATION: tuple[tuple[str, Pass], ...] = (
    ("apply_hints", apply_hints),
    ("apply_strategy_file", apply_strategy_file),
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
    ("apply_hints", apply_hints),
    ("apply_strategy_file", apply_strategy_file),
    ("search", search),
    ("place_parameters", place_parameters),
    ("check_strategy_file", check_strategy_file),
    ("verify", verify),
)

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


def run_pipeline(graph: Graph, ctx: PlanContext, passes: Sequence[tuple[str, Pass]] | None = None) -> Graph:
    """``graph`` through ``passes`` (default: the mode's, :func:`passes_for`), each pass timed by name."""
    timings = {}
    checked = _env.pass_checks_enabled()
    if ctx.optimizer_slots is not None:  # what the cost model's memory terms read (parallel.memory_model)
        graph = dataclasses.replace(graph, meta={**graph.meta, "optimizer_slots": ctx.optimizer_slots})
    for name, fn in passes_for(ctx) if passes is None else passes:
        given = PassInput.of(graph) if checked else None
        started = time.perf_counter()
        result = fn(graph, ctx)
        timings[name] = time.perf_counter() - started
        if given is not None:
            check_pass(name, given, result, ctx)
        graph = result
    return dataclasses.replace(graph, meta={**graph.meta, "pass_seconds": timings})
