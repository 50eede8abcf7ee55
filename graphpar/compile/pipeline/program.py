"""The pipelined train step: one compiled program per stage, on disjoint device groups (MPMD), run by a schedule.

XLA's SPMD partitioner places every op of a program on all of the program's devices, and pipeline stages differ
(embedding + layers in one, layers + head in the next), so a pipelined step cannot be one SPMD program. Instead:

1. **plan** (once per batch shape): trace the ``PipelineCell``'s network on one micro-batch, plan it with the usual
   pass pipeline on a mesh of ``device_num / pipeline_stages`` devices (the user's strategies are relative to one
   stage's devices, as in MindSpore), and cut it into stages (``parallel.pipeline_stages``); the graph is a
   ``Traced`` then a ``Planned`` stage value, built through the orchestrator and cached like any program's
   (:meth:`PipelineProgram.planned`);
2. **compile** per stage ``s``, on mesh ``s`` (the ``s``-th group of consecutive ranks): a forward program (the
   stage's nodes under ``jax.vjp``, returning the activations it sends and the residuals its backward needs), a
   backward program (the residuals' VJP, accumulating parameter gradients over micro-batches) and an update program
   (the optax update of the stage's parameters), each lowered and compiled on its first call into the same stage
   values as any program (``Lowered``, ``Compiled``, counted in :attr:`PipelineProgram.counts`);
3. **run**: dispatch the programs in the schedule's order (``compile.pipeline.schedule``: GPipe, 1F1B, interleaved
   1F1B, zero_bubble_v; ``step_walk``), moving each activation to the next stage's devices and each activation
   gradient back (``jax.device_put`` within a process; counted in :class:`PipelineStats`), then one optimizer update
   per stage.

With ``pipeline_interleave`` the cut is by virtual stage (chunk): each chunk gets its own programs on its stage's
devices, and the schedule's actions name (stage, segment); a schedule with ``W`` actions runs each backward as
``backward_input`` then, later, ``backward_weight`` (``stage_programs``). :meth:`PipelineProgram.trace_step` runs
one step with each action timed (``step_record``).

The loss is MindSpore's ``PipelineCell`` loss: the sum of the micro-batches' losses. Residuals are held only as the
buffers of the forward's VJP object until that micro-batch's backward ran; :class:`PipelineStats` records the most
micro-batches (and bytes) each stage held at once. In a multi-process job every process walks the same schedule
and runs only its own stages' programs; transfers between processes are small collective programs
(``compile.pipeline.transfer``), the loss is broadcast from the last stage's process (``compile.pipeline.processes``).
A Parameter used by several stages has a copy in each, their gradients summed before the update
(``compile.pipeline.stage_values``).

Like every program, :class:`PipelineProgram` is built on ``runtime.skeleton.Program``: its settings (checked) are
one :class:`PipelineSettings` snapshot per compile key, its network state and stage cache are the skeleton's.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar import _context
from graphpar._context import AutoParallelContext
from graphpar.common.deferred import Deferred
from graphpar.common.parameter import Parameter
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.pipeline.build import Built, Stage, build_stages, stage_compiled
from graphpar.compile.pipeline.processes import local_value, put_host, share_loss
from graphpar.compile.pipeline.schedule import dispatch_order
from graphpar.compile.pipeline.schedule_virtual import schedule_orders
from graphpar.compile.pipeline.stage_values import PARAMS, REST, KeptValues, sum_shared
from graphpar.compile.pipeline.settings import PipelinePlan, PipelineSettings, read_pipeline_settings
from graphpar.compile.pipeline.stage_opt_state import join_state, split_state
from graphpar.compile.pipeline.step_record import ActionTiming, StepTrace
from graphpar.compile.pipeline.step_walk import PipelineStats, StepWalk
from graphpar.compile.pipeline.stage_split import PipelineError, StageSplit, assign_stages, split_stages
from graphpar.compile.plans.layout import GraphLayout, Layout
from graphpar.compile.plans.planned import Planned, Traced
from graphpar.compile.runtime.skeleton import Program
from graphpar.compile.staging.cache import ProgramKey
from graphpar.compile.staging.progress import CompileProgress
from graphpar.dump.pipeline import (
    PipelineJob, ScheduleMeasure, maybe_dump_begin, maybe_dump_execute, maybe_save_strategy, stage_note)
from graphpar.ir.graph import Graph
from graphpar.nn.pipeline_cell import PipelineCell, check_micro_split, pipeline_cell_of
from graphpar.planner import strategy_file
from graphpar.planner.mesh import make_mesh
from graphpar.planner.passes.context import PlanRequest
from graphpar.planner.planning import plan_graph


@dataclass(frozen=True)
class StepGradients:
    """One step between its two parts (:meth:`PipelineProgram.gradients`, :meth:`PipelineProgram.apply`): the
    stages built for the batch, the working values of the parameters, state and optimizer states of the stages
    this process runs, the walk that made them, the loss (the sum over micro-batches) and each stage's accumulated
    gradients (``grads[s]``: in the order of ``built.stages[s].sg.params``; None for a stage another process
    runs)."""

    built: Built
    pv: dict[tuple[int, int], Any]
    rv: dict[tuple[int, int], Any]
    opt: list[Any]
    walk: StepWalk
    loss: jax.Array
    grads: list[Any]


class PipelineProgram(Program[PipelineSettings]):
    """The train step of a ``TrainOneStepCell`` whose network is a ``PipelineCell`` and ``pipeline_stages > 1``."""

    MAX_IN_FLIGHT = 4  # programs queued on the devices at once (XLA:CPU deadlocks with long multi-device queues)

    def __init__(self, train_cell: Any, keep_gradients: bool = False):
        pipe = pipeline_cell_of(train_cell.network)  # through an AutoParallel around the PipelineCell
        if not isinstance(pipe, PipelineCell):
            n_stages = _context.current_parallel().pipeline_stages
            raise PipelineError(f"TrainOneStepCell's network {type(pipe).__name__}",
                                f"pipeline_stages={n_stages} needs the loss network wrapped in "
                                "nn.PipelineCell(network, micro_size)",
                                "use TrainOneStepCell(nn.PipelineCell(WithLossCell(net, loss), micro_size), opt)")
        super().__init__(f"{type(pipe.network).__name__} pipelined train step", pipe.network)
        self.train_cell, self.optimizer, self.sens, self.pipe = train_cell, train_cell.optimizer, train_cell.sens, pipe
        settings = self.settings  # the settings are checked when the program is built
        self.network.check_names()
        self.pipe.set_train(True)
        self.stats = PipelineStats(peak_live_micro_batches=[0] * settings.job.n_stages,
                                   peak_residual_bytes=[0] * settings.job.n_stages)
        self._built: dict[ProgramKey, Built] = {}
        self._opt_written: Any = None
        self._stage_opt: list[Any] | None = None
        self._kept = KeptValues()  # each stage's copy of the parameters and state, from the last step
        self._queue: collections.deque = collections.deque()
        # a functional step hands the gradients to the user's code, which may return them: the update then
        # reads them without taking (donating) their buffers
        self.keep_gradients = keep_gradients

    def read_settings(self) -> PipelineSettings:
        return read_pipeline_settings(self.pipe)

    def trainable(self) -> Sequence[Any]:
        return self.optimizer.parameters

    # --- what it reads of the settings --------------------------------------------------------------------------
    @property
    def plan(self) -> PipelinePlan:
        return self.settings.plan

    @property
    def job(self) -> PipelineJob:
        return self.settings.job

    @property
    def pctx(self) -> AutoParallelContext:
        return self.job.pctx

    @property
    def n_stages(self) -> int:
        return self.job.n_stages

    @property
    def micro_size(self) -> int:
        return self.job.micro_size

    @property
    def devices(self) -> tuple[jax.Device, ...]:
        return self.job.devices

    @property
    def per_stage(self) -> int:
        return self.job.per_stage

    # --- planning and compiling --------------------------------------------------------------------------------
    def _planned(self, ns: NetworkState, key: ProgramKey, avals: list[jax.ShapeDtypeStruct]) -> Planned:
        """The micro-batch graph traced and planned (``Traced`` then ``Planned``), once per compile key, in the
        orchestrator's cache like any program's (counted, timed in :attr:`compile_seconds`)."""
        pctx, job = self.pctx, self.job

        def trace() -> Traced:
            graph, out_treedef = trace_network(ns, avals, "train")  # outputs: [loss] + the new rest state
            return Traced(graph, "train", out_treedef)

        def passes(graph: Graph) -> Graph:
            # bad stages are reported before any planning
            assign_stages(graph, self.network, self.n_stages, self.settings.layout)
            # each stage's devices plan the graph (one mesh of per_stage devices)
            return plan_graph(graph, PlanRequest(self.per_stage, pctx.parallel_mode, pctx.search_mode, "train",
                                                 pctx.dataset_strategy, strategy_file.for_plan(pctx),
                                                 algo=_context.current_algo(),
                                                 propagation_order=pctx.propagation_order))

        def layout(graph: Graph) -> Layout:
            # where the plan puts the arrays on one stage's devices (stage 0's; each stage's own: its StageLayout)
            return GraphLayout(make_mesh(job.devices[:job.per_stage], [graph.plan.mesh.sizes]), graph)

        with CompileProgress(self.orchestrator.what) as progress:
            return self.orchestrator.planned_by(key, "train", progress, trace, passes, layout)

    def _build(self, ns: NetworkState, key: ProgramKey, avals: list[jax.ShapeDtypeStruct]) -> Built:
        job, layout = self.job, self.settings.layout
        graph = self._planned(ns, key, avals).graph
        split = split_stages(graph, self.network, job.n_stages, len(ns.params.values()), len(ns.rest.values()),
                             layout)
        stages = build_stages(graph, split, ns, job.devices, job.per_stage, self.optimizer, self.sens, layout,
                              donate_gradients=not self.keep_gradients)
        orders = schedule_orders(job.scheduler, layout, job.micro_size)
        built = Built(key, graph, split, stages, dispatch_order(orders, layout), orders, layout)
        self._record_stages(ns, split)
        if _context.current().save_graphs:  # each stage's dumps say which stage and ranks they describe
            for st in stages:
                st.sg.graph = st.sg.graph.with_plan(note=stage_note(job, *layout.place(st.sg.stage), st.ranks))
        maybe_dump_begin(built.description(), job)
        maybe_save_strategy(built.description(), job, set(ns.param_names()))
        return built

    def _record_stages(self, ns: NetworkState, split: StageSplit) -> None:
        """Each Parameter carries its stage (checkpoints and strategy files record it)."""
        for holder in ns.params.holders + ns.rest.holders:
            if isinstance(holder, Parameter) and holder.name in split.param_stage:
                holder.set_metadata(pipeline_stage=split.param_stage[holder.name])

    def _key(self, ns: NetworkState, inputs: list[np.ndarray]) -> tuple[ProgramKey, list[jax.ShapeDtypeStruct]]:
        """The compile key and avals of one micro-batch of ``inputs`` (what the graph is traced and planned on)."""
        m = self.micro_size
        avals = [jax.ShapeDtypeStruct((x.shape[0] // m,) + tuple(x.shape[1:]), jax.dtypes.canonicalize_dtype(x.dtype))
                 for x in inputs]
        return ProgramKey.of("train", ns.structure, avals), avals

    def _get_built(self, ns: NetworkState, inputs: list[np.ndarray]) -> Built:
        """The stages for this batch shape (planned on one micro-batch), built once per compile key."""
        key, avals = self._key(ns, inputs)
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self._build(ns, key, avals)
        return built

    # --- inspection --------------------------------------------------------------------------------------------
    def planned(self, inputs: Sequence[Any]) -> Planned:
        """The planned micro-batch graph of the pipelined step for the global batch ``inputs`` (traced and planned
        if not cached yet; its ``traced``: the traced stage), before it is cut into stages."""
        ns = self.state
        arrays = [np.asarray(x) for x in inputs]
        for i, x in enumerate(arrays):
            check_micro_split(i, x.shape, self.micro_size)
        key, avals = self._key(ns, arrays)
        return self._planned(ns, key, avals)

    # --- running -----------------------------------------------------------------------------------------------
    def _call(self, built: Built, st: Stage, kind: str, *args: Any) -> Any:
        """Run one stage program (compiled on its first call: ``build.stage_compiled``), at most
        ``MAX_IN_FLIGHT`` queued."""
        out = stage_compiled(self.orchestrator.cache, built.key, st, kind, args)(*args)
        self._queue.append(out)
        while len(self._queue) > self.MAX_IN_FLIGHT:
            # outputs donated to a later program since (accumulated gradients) are skipped
            jax.block_until_ready([x for x in jax.tree.leaves(self._queue.popleft())
                                   if isinstance(x, jax.Array) and not x.is_deleted()])
        return out

    def _opt_states(self, ns: NetworkState, built: Built, pvals: dict[tuple[int, int], Any]) -> list[Any]:
        """Per-stage optimizer states, cut from the optimizer's one state (set by a checkpoint load, or by the
        previous step, whose states are reused as they are)."""
        if self._stage_opt is not None and self.optimizer.opt_state is self._opt_written:
            return self._stage_opt
        names = ns.param_names()
        tx = self.optimizer.transformation()
        whole = self.optimizer.opt_state
        if whole is None:  # before the first step every process holds the initial values
            # a deferred Parameter (no_init_parameters) is drawn for it: the same values on every process
            whole = tx.init(dict(zip(names, [np.asarray(v.value() if isinstance(v, Deferred) else v)
                                             for v in ns.params.values()])))
        stages = built.stages
        self._stage_opt = split_state(whole, tx, [{names[i]: ns.params.values()[i] for i in st.sg.params}
                                                  for st in stages],
                                      [{names[i]: st.param_sh[i] for i in st.sg.params} for st in stages],
                                      [st.mesh for st in stages], [st.owned for st in stages])
        return self._stage_opt

    def _write_opt(self, ns: NetworkState, built: Built, states: list[Any]) -> None:
        """Put the stages' optimizer states back together as the optimizer's one state (for checkpoints)."""
        names = ns.param_names()
        if built.opt_template is None:
            built.opt_template = jax.eval_shape(self.optimizer.transformation().init,
                                                {n: jax.ShapeDtypeStruct(np.shape(v), v.dtype)
                                                 for n, v in zip(names, ns.params.values())})
        owner = {names[i]: st.sg.stage for st in reversed(built.stages) for i in st.sg.params}  # first stage
        local = next(st.sg.stage for st in built.stages if st.owned)
        self._stage_opt = states
        self._opt_written = self.optimizer.opt_state = join_state(built.opt_template, states, owner, local)

    def run_step(self, inputs: Any) -> jax.Array:
        """One pipelined training step on a global batch; returns the summed micro-batch loss. In a multi-process
        job every process walks the same schedule and runs the programs of its own stages
        (``compile.pipeline.processes``, ``compile.pipeline.transfer``)."""
        return self._step(inputs, None)[0]

    def trace_step(self, inputs: Any) -> tuple[jax.Array, StepTrace]:
        """One training step (as :meth:`run_step`) whose actions run one at a time, each waited for and timed: the
        loss and the :class:`~graphpar.compile.pipeline.step_record.StepTrace` (see ``step_record``)."""
        timings: list[ActionTiming] = []
        loss, built = self._step(inputs, timings)
        return loss, StepTrace(tuple(tuple(o) for o in built.orders), built.virtual, tuple(timings))

    def _step(self, inputs: Any, timings: list[ActionTiming] | None) -> tuple[jax.Array, Built]:
        step = self.gradients(inputs, timings)
        self.apply(step, step.grads)
        return step.loss, step.built

    def gradients(self, inputs: Any, timings: list[ActionTiming] | None = None) -> StepGradients:
        """The first part of a step: the schedule walked on a global batch (every micro-batch's forward and
        backward), the loss and each stage's accumulated gradients; :meth:`apply` then updates the parameters
        (a functional step runs the user's code between the two: ``compile.functional.pipelined``)."""
        ns = self.state
        arrays = [np.asarray(x) for x in inputs]
        for i, x in enumerate(arrays):
            check_micro_split(i, x.shape, self.micro_size)
        built = self._get_built(ns, arrays)
        stages = built.stages
        pv, rv = self._kept.take(stages, ns.params, PARAMS), self._kept.take(stages, ns.rest, REST)
        opt = self._opt_states(ns, built, pv)
        m, rows = self.micro_size, [x.shape[0] // self.micro_size for x in arrays]  # each input's micro-batch rows
        data = [[[put_host(arrays[i][k * rows[i]:(k + 1) * rows[i]], sh)
                  for i, sh in zip(st.sg.data, st.data_sh)] for k in range(m)] if st.owned else None for st in stages]
        first = self.stats.steps == 0
        walk = StepWalk(built, lambda st, kind, *args: self._call(built, st, kind, *args), pv, rv, data, self.stats,
                        first)
        walk.run(timings, self._drain)
        self.stats.shared_sums_last_step = sum_shared(built, walk.grads)
        me = jax.process_index()
        # the PipelineCell's loss: the sum over micro-batches (read back once, so no extra program is compiled),
        # computed where the last stage runs and shared with every process
        last = stages[-1]
        source = last.owned and me == min(d.process_index for d in last.mesh.devices.flat)
        total = share_loss(np.float32(sum(np.float64(local_value(x)) for x in walk.losses)), source)
        mine = next(d for st in reversed(stages) if st.owned for d in reversed(list(st.mesh.devices.flat))
                    if d.process_index == me)
        return StepGradients(built, pv, rv, opt, walk, jax.device_put(total, mine), walk.grads)

    def apply(self, step: StepGradients, grads: list[Any] | None) -> None:
        """The second part of a step: each stage's optimizer update with ``grads`` (per stage, in the order of its
        parameters: ``step.grads`` or what a functional step made of them; None: no update, a step that skipped
        its optimizer), then the new values kept, the optimizer's one state written, the counts and (once) the
        execute dumps."""
        ns, built, pv, opt, walk = self.state, step.built, step.pv, step.opt, step.walk
        stages = built.stages
        for st in stages:
            if grads is None or not st.sg.params or not st.owned:
                continue
            s = st.sg.stage
            new, opt[s] = self._call(built, st, "update", [pv[(s, i)] for i in st.sg.params], grads[s], opt[s])
            pv.update({(s, i): value for i, value in zip(st.sg.params, new)})
        self._kept.write(stages, ns.params, PARAMS, pv)
        self._kept.write(stages, ns.rest, REST, step.rv)
        self._write_opt(ns, built, opt)
        first = self.stats.steps == 0
        self.stats.steps += 1
        self.stats.transfers_last_step = walk.moved
        self.stats.transfers_total += walk.moved
        if first:
            self.stats.transfer_log = walk.log
        if not built.dumped and grads is not None:  # once the stages' update programs ran
            built.dumped = True
            stats = self.stats
            measure = ScheduleMeasure(stats.transfer_log, stats.transfers_last_step, stats.peak_live_micro_batches,
                                      stats.peak_residual_bytes)
            maybe_dump_execute(built.description(), self.job, measure,
                               [st.hlo() if st.owned else None for st in stages])

    def _drain(self) -> None:
        """Wait for every queued program (a traced step times each action alone)."""
        while self._queue:
            jax.block_until_ready([x for x in jax.tree.leaves(self._queue.popleft())
                                   if isinstance(x, jax.Array) and not x.is_deleted()])

    def run_steps(self, stacked_inputs: Any) -> jax.Array:
        """Sink mode: ``len(stacked_inputs[0])`` pipelined steps, one after the other; the per-step losses."""
        stacked = [np.asarray(x) for x in stacked_inputs]
        losses = [self.run_step([x[i] for x in stacked]) for i in range(stacked[0].shape[0])]
        return jnp.stack([jax.device_put(x, self.devices[-1]) for x in losses])

