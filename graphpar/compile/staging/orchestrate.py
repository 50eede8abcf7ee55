"""The one place that turns a network into a program: trace → plan → lower → compile, each stage a value.

``Orchestrator.planned`` traces the network (``plan.trace``) and runs the pass pipeline of the plan
(``parallel.pipeline``) on it, writing the begin dump (``Orchestrator.planned_by``: the same stages with the
caller's tracing and passes, for the pipeline's micro-batch graph); ``Orchestrator.compiled`` lowers a step function
of the planned graph with its shardings (``jax.jit(...).trace(...).lower()``), has XLA compile it (or reads it back
from XLA's persistent cache: ``staging.xla_cache``), and writes the execute dump. A step whose caller describes
what it is made of (``recipe``) is first looked up in the executable cache (``staging.executables``): a hit skips
the step's autodiff trace, its lowering and XLA, and its ``Compiled`` has no ``Lowered`` stage (``lowered`` None;
whoever needs the StableHLO, ``TrainProgram.stages``/``lowered``, lowers it afresh from the same function; the
execute dump is the loaded executable's HLO). Both are cached
(``compile.cache``); both time their stages and tell the user about a slow compile (``compile.progress``). The
executable that runs is always the one compiled here, with or without ``save_graphs``: ``jax.stages.Compiled``
dispatches through the same C++ path as ``jax.jit``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar import _context
from graphpar.compile.lowering import recompute
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.layout import Layout
from graphpar.compile.plans.planned import Planned, Traced
from graphpar.compile.staging import executables
from graphpar.compile.staging.cache import ProgramCache, ProgramKey
from graphpar.compile.staging.fingerprint import Unseen, code_digest, digest, environment, graph_parts
from graphpar.compile.staging.frozen_heap import frozen_heap
from graphpar.compile.staging.prefetch import Prefetch, start as start_prefetch
from graphpar.compile.staging.progress import CompileProgress
from graphpar.compile.staging.stages import Compiled, Lowered, StepRecipe, StepSignature
from graphpar.compile.staging.xla_cache import use_persistent_cache, watching_reads
from graphpar.compile.plans import ascend_groups
from graphpar._logging import notice_once
from graphpar.dump.writer import maybe_dump_begin, maybe_dump_execute
from graphpar.ir.graph import Graph
from graphpar.planner import strategy_file
from graphpar.planner.planning import plan_graph


def run_passes(plan: ExecutionPlan, graph: Graph, ns: NetworkState, purpose: str) -> Graph:
    """A traced graph planned as the plan requests (``planner.planning.plan_graph``); writes the begin dump and
    the strategy file (if configured)."""
    request = plan.request(graph, purpose)
    graph = plan_graph(graph, request)
    maybe_dump_begin(graph, plan)
    ascend_groups.check(graph, plan.pctx.parallel_mode, plan.pctx.global_rank)
    strategy_file.maybe_save(graph, plan.pctx, plan.n, set(ns.param_names()), replicated=request.replicated,
                             parameters=ns.params.holders)
    return graph


class Orchestrator:
    """Builds and caches the programs of one network (a train cell's steps, or a Cell's forward calls)."""

    def __init__(self, what: str):
        self.what = what
        self.cache = ProgramCache()

    def planned(self, plan: ExecutionPlan, ns: NetworkState, avals: Sequence[Any], purpose: str,
                key: ProgramKey, progress: CompileProgress, call: Any = None,
                defer_input_checks: bool = False) -> Planned:
        """``defer_input_checks``: the caller makes the planned graph's ``input_checks`` on each batch itself
        (``ops.runtime_checks.check_inputs``), so they are not compiled into the program."""
        def build() -> Planned:
            if plan.pynative:
                return Planned(None, plan.layout(None), purpose)
            return self._trace_and_plan(purpose, progress,
                                        lambda: plan.trace(ns, avals, purpose, call, defer_input_checks),
                                        lambda graph: run_passes(plan, graph, ns, purpose), plan.layout)

        planned, built = self.cache.planned.get_or_build(key, build)
        if not built and not plan.pynative and _dumps_on() and ("begin", key) not in self.cache.dumped:
            maybe_dump_begin(planned.graph, plan)
        if _dumps_on():
            self.cache.dumped.add(("begin", key))
        return planned

    def planned_by(self, key: ProgramKey, purpose: str, progress: CompileProgress, trace: Callable[[], Traced],
                   passes: Callable[[Graph], Graph], layout: Callable[[Graph], Layout]) -> Planned:
        """The planned stage under ``key`` for a program whose tracing and planning are not an execution plan's
        (the pipeline's micro-batch graph, ``compile.pipeline.program``): ``trace``, then ``passes`` on its graph,
        built, timed, counted and cached as :meth:`planned` builds a plan's (its dumps are the caller's)."""
        return self.cache.planned.get_or_build(key, lambda: self._trace_and_plan(purpose, progress, trace, passes,
                                                                                 layout))[0]

    def _trace_and_plan(self, purpose: str, progress: CompileProgress, trace: Callable[[], Traced],
                        passes: Callable[[Graph], Graph], layout: Callable[[Graph], Layout]) -> Planned:
        """Trace, then plan: each stage timed (``progress``) with the heap frozen, and counted."""
        started, cpu = time.perf_counter(), time.process_time()
        with progress.stage("tracing"), frozen_heap():
            traced = trace()
        self.cache.count("traces")
        traced_cpu = time.process_time()
        with progress.stage("planning"), frozen_heap():
            graph = passes(traced.graph)
        self.cache.count("plans")
        cpu_seconds = {"tracing": traced_cpu - cpu, "planning": time.process_time() - traced_cpu}
        return Planned(graph, layout(graph), purpose, traced.out_treedef, time.perf_counter() - started, traced,
                       cpu_seconds)

    def prefetch(self, plan: ExecutionPlan, key: ProgramKey, variant: str, ns: NetworkState) -> Prefetch | None:
        """Start reading the executable the last run of this step used, before it is traced (``staging.prefetch``:
        taken by :meth:`compiled` only if the step's key turns out the same), guessed from what is known before
        tracing: the program, the batch, the settings and the network state's names, shapes and dtypes. None when
        the step is built already, runs eagerly, the compile cache is off or the settings cannot be described."""
        folder = executables.directory()
        if folder is None or plan.pynative or (key, variant) in self.cache.compiled.entries:
            return None
        state = [(name, np.shape(v), str(jnp.result_type(v))) for names, values in (
            (ns.param_names(), ns.params.values()), (ns.rest.names(), ns.rest.values()))
                 for name, v in zip(names, values)]
        try:
            guessed = digest(self.what, variant, key.purpose, key.signature, key.context, state)
        except Unseen:
            return None
        return start_prefetch(folder, guessed)

    def compiled(self, plan: ExecutionPlan, planned: Planned, key: ProgramKey, variant: str,
                 fn: Callable[..., Any], signature: StepSignature, avals: Sequence[Any],
                 progress: CompileProgress, recipe: StepRecipe | None = None,
                 prefetched: Prefetch | None = None) -> Compiled:
        """The compiled ``fn`` for arguments of ``avals`` (``jax.ShapeDtypeStruct`` trees).

        ``recipe``: what ``fn`` is made of beyond the planned graph and the signature, for the executable cache
        (its digest must change whenever ``fn`` would: the train cell's type and settings, the optimizer, ...); None
        where the caller cannot say (``fn`` runs code of the user's that the traced graph does not hold): then only
        XLA's cache serves the compile. ``prefetched``: :meth:`prefetch`'s read, taken if it read this key."""
        def build() -> Compiled:
            if plan.pynative:
                return Compiled(planned, signature, fn, fn=fn)
            folder = executables.directory() if recipe is not None else None  # None: the compile cache is off
            stored = None
            if folder is not None:
                with progress.stage("executable cache key"):
                    stored = self._step_key(planned, key, variant, signature, avals, recipe)
            if stored is None:
                folder = None
                if prefetched is not None:
                    prefetched.drop()
            if folder is not None:
                with progress.stage("executable cache read"):
                    if prefetched is not None and prefetched.folder == folder:
                        executable, guessed = prefetched.load(stored)
                    else:
                        executable, guessed = executables.load(folder, stored), False
                if executable is not None:
                    self.cache.count("loads")
                    if guessed:
                        self.cache.count("prefetched")
                    if prefetched is not None:
                        prefetched.remember(stored)
                    read = ("executable cache key", "executable cache read")
                    return Compiled(planned, signature, executable, executable,
                                    {k: progress.seconds[k] for k in read}, fn, None,
                                    {k: progress.cpu_seconds[k] for k in read})
            with progress.stage("lowering"):
                lowered = lower(fn, signature, avals, planned)
            self.cache.count("lowerings")
            use_persistent_cache(self.what, lowered.effects)
            with progress.stage("XLA compile"), watching_reads() as reads:
                executable = lowered.compile()
            self.cache.count("compiles")
            devices = executables.device_ids(signature.in_shardings)
            # not stored: an executable XLA's cache served (XLA:CPU keeps no kernels for an executable it read back,
            # so serialised again it fails when it runs: ``xla_cache.watching_reads``; it is stored after a compile
            # that XLA's cache does not serve), a program with host callbacks (they live in this process)
            if folder is not None and devices is not None and not lowered.effects and not reads:
                executables.store(folder, stored, executable, devices, self.what)
                if prefetched is not None and (folder / f"{stored}.exe").exists():
                    prefetched.remember(stored)
            built = [k for k in ("executable cache key", "lowering", "XLA compile") if k in progress.seconds]
            seconds, cpu_seconds = {k: progress.seconds[k] for k in built}, {k: progress.cpu_seconds[k] for k in built}
            return Compiled(planned, signature, executable, executable, seconds, fn, lowered, cpu_seconds)

        compiled, built = self.cache.compiled.get_or_build((key, variant), build)
        if not plan.pynative and _dumps_on() and ("execute", key, variant) not in self.cache.dumped:
            self.cache.dumped.add(("execute", key, variant))
            maybe_dump_execute(planned.graph, plan, compiled.as_text())
        return compiled

    def _step_key(self, planned: Planned, key: ProgramKey, variant: str, signature: StepSignature,
                  avals: Sequence[Any], recipe: StepRecipe | None) -> str | None:
        """The executable cache's key of a step (``staging.fingerprint``), None without a recipe or where a part
        cannot be described (said once per program)."""
        if recipe is None or planned.graph is None:
            return None
        try:
            return digest(code_digest(), environment(), key.purpose, variant, key.signature, key.context,
                          graph_parts(planned), signature, avals, recipe.parts,
                          arguments=frozenset(map(id, recipe.arguments)))
        except Unseen as exc:
            notice_once(f"step-executable-unseen:{self.what}", f"{self.what} is not kept in graphpar's executable "
                        f"cache: its step holds a {exc} that graphpar cannot describe; XLA's compilation cache "
                        "serves its compile", logging.INFO)
            return None


def lower(fn: Callable[..., Any], signature: StepSignature, avals: Sequence[Any], planned: Planned) -> Lowered:
    """``fn`` traced for autodiff and lowered to StableHLO with the signature's shardings (the heap frozen:
    ``compile.frozen_heap``)."""
    started, cpu = time.perf_counter(), time.process_time()
    jitted = jax.jit(fn, in_shardings=signature.in_shardings, out_shardings=signature.out_shardings,
                     donate_argnums=signature.donate_argnums)
    with frozen_heap():
        traced = jitted.trace(*avals)
        lowered = traced.lower()
    effects = tuple(sorted({type(e).__name__ for e in traced.jaxpr.effects}))
    options = recompute.compiler_options(_platform(signature), traced.jaxpr)
    return Lowered(planned, lowered, signature, time.perf_counter() - started, time.process_time() - cpu, effects,
                   options)


def _platform(signature: StepSignature) -> str:
    """The platform of the devices the step's arguments live on (the default backend's when none is placed)."""
    for sharding in jax.tree.leaves(signature.in_shardings):
        if isinstance(sharding, jax.sharding.Sharding):
            return next(iter(sharding.device_set)).platform
    return jax.default_backend()


def _dumps_on() -> bool:
    return _context.current().save_graphs > 0
