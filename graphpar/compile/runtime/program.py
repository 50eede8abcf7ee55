"""The compiled train step: forward, loss, gradients and the optax update as one XLA program.

``TrainProgram`` is built from a ``TrainOneStepCell`` when it first runs. A call that repeats the last one (the
training loop) is run by the last call's ``compile.bound_step.BoundStep`` after change-triggered checks (revision
numbers, the batch's and the state's identity). Any other:

1. ``_dispatch``: finds the compiled program for the network's current structure, the batch signature and the
   context (the compile cache, which builds a missing program through ``compile.orchestrate``: trace → plan →
   lower → compile), places the batch and binds a step to it;
2. ``_place_state``: the parameters, other state and optimizer state where that program wants them (the first
   call of a program, or something replaced them since the last step: ``set_data``, a checkpoint load);
3. ``BoundStep.run``: the call itself (``jax.stages.Compiled``: the C++ dispatch path, with or without
   ``save_graphs``), the new values into the network's Variables and the optimizer, so ``param.asnumpy()`` shows
   trained values, and at most two steps in flight.

The step function is composed in ``compile.step`` from named parts (objective → gradient → transform → update);
:meth:`TrainProgram.step_parts` is where a feature (gradient accumulation, mixed precision) swaps one part.

``TrainProgram`` is built on ``runtime.skeleton.Program``: what it reads of the settings (the plan, the
micro-batches per step, the parallel optimizer's configuration) is one :class:`TrainSettings` snapshot per compile
key, so a changed ``grad_accumulation_step`` reaches the next step as a changed plan does.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from graphpar import _context
from graphpar.common.deferred import Deferred, born
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.lowering.opt_shard import OptimizerSharding
from graphpar.compile.lowering.recompute import advise_cpu_scheduler
from graphpar.compile.lowering.step import StepParts, optax_update, sink_loop, train_step
from graphpar.compile.plans.choose import choose_plan
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.layout import Layout, state_shardings
from graphpar.compile.plans.planned import Planned
from graphpar.compile.runtime import accumulate
from graphpar.compile.runtime.bound_step import BoundStep, check_live, check_live_state, input_signature, revision
from graphpar.compile.runtime.placement import (ensure_placed, global_aval, initial_state, place_state, put_batch,
                                                stacked_sharding)
from graphpar.compile.runtime.skeleton import Program
from graphpar.compile.staging.cache import ProgramKey
from graphpar.compile.staging.orchestrate import lower
from graphpar.compile.staging.progress import CompileProgress
from graphpar.compile.staging.stages import Compiled, Lowered, ProgramStages, StepRecipe, StepSignature
from graphpar.nn.grad_accumulation import unwrap_accumulation
from graphpar.ops import runtime_checks
from graphpar.planner.optimizer_parallel import OptimizerParallelConfig
from graphpar.nn.loss_scale import loss_scale_of, train_transformation


@dataclass(frozen=True)
class TrainSettings:
    """What the train step reads of the settings, snapshotted once per compile key (``runtime.skeleton``): the
    execution plan, the micro-batches per step (a ``GradAccumulation`` wrapper's ``micro_size``, else
    ``grad_accumulation_step``) and the parallel optimizer's configuration."""

    plan: ExecutionPlan
    micro_size: int
    opt_config: OptimizerParallelConfig


class TrainProgram(Program[TrainSettings]):
    """The compiled train steps of a ``TrainOneStepCell``, one per (structure, batch signature, context)."""

    MAX_IN_FLIGHT = 2

    def __init__(self, train_cell: Any):
        # bigger models: GradAccumulation / grad_accumulation_step and the parallel optimizer (compile.accumulate,
        # compile.opt_shard)
        network, _ = unwrap_accumulation(train_cell.network)
        super().__init__(f"{type(network).__name__} train step", network)
        self.train_cell = train_cell
        self._opt_sharding: OptimizerSharding | None = None
        self.optimizer = train_cell.optimizer
        self.sens = train_cell.sens
        self.network.check_names()
        self.network.set_train(True)
        self._bound: BoundStep | None = None  # the last call's program, bound to the state (the fast path)
        self._in_flight: collections.deque = collections.deque()  # losses of the steps still running
        _ = self.settings  # the plan is chosen when the program is built: settings it refuses are named now

    # --- what it is made of ------------------------------------------------------------------------------------
    def read_settings(self) -> TrainSettings:
        pctx = _context.current_parallel()
        _, micro_size = unwrap_accumulation(self.train_cell.network, pctx.grad_accumulation_step)
        opt_config = OptimizerParallelConfig.from_context(pctx, self.trainable())
        plan = choose_plan(self.network, self.optimizer)
        advise_cpu_scheduler(self.network, plan.devices[0].platform, opt_config.regather_for_backward)
        return TrainSettings(plan, micro_size, opt_config)

    def trainable(self) -> Sequence[Any]:
        return self.optimizer.parameters

    @property
    def plan(self) -> ExecutionPlan:
        """The execution plan for the settings in force (chosen once per compile key)."""
        return self.settings.plan

    @property
    def micro_size(self) -> int:
        """Micro-batches per step under the settings in force (1: no gradient accumulation)."""
        return self.settings.micro_size

    @property
    def opt_config(self) -> OptimizerParallelConfig:
        return self.settings.opt_config

    @property
    def pynative(self) -> bool:
        return self.plan.pynative

    def step_parts(self, planned: Planned, ns: NetworkState) -> StepParts:
        """The parts the step is composed of (see ``compile.step``); override or extend a part here."""
        plan, sens = self.plan, self.sens

        def objective(params, rest, inputs):
            return plan.objective(planned, ns, params, rest, inputs, sens)

        # mixed precision hook (nn/loss_scale.py): with a loss-scale cell the objective is multiplied by the scale
        # kept in the optimizer state, and the update unscales, skips overflowing steps and adjusts the scale
        return StepParts(objective=objective, update=optax_update(self._transformation()), loss_scale=loss_scale_of)

    def _transformation(self) -> optax.GradientTransformation:
        """The optimizer's transformation, wrapped in the train cell's loss scaling if it has one (unchanged
        without: the step is then the float32 program exactly)."""
        return train_transformation(self.train_cell, self.optimizer)

    def optimizer_sharding(self, ns: NetworkState, layout: Layout) -> OptimizerSharding:
        """Storage (parallel optimizer) and compute shardings of the trainable parameters under ``layout``."""
        compute = [layout.param_sharding(n, tuple(np.shape(v))) for n, v in zip(ns.param_names(), ns.params.values())]
        cached, config = self._opt_sharding, self.opt_config
        if cached is None or cached.compute != compute or cached.config != config:
            cached = OptimizerSharding(config, ns.param_names(), ns.params.values(), compute)
            self._opt_sharding = cached
        return cached

    def _step(self, planned: Planned, ns: NetworkState):
        """The step function: ``compile.step``'s, or gradient accumulation's per-micro-batch scan
        (``compile.accumulate``), with parameters gathered from their parallel-optimizer storage."""
        opt = self.optimizer_sharding(ns, planned.layout)
        parts = self.step_parts(planned, ns)
        split = accumulate.planned_split(self.plan, planned, ns, opt, self.micro_size, self.orchestrator.cache)
        if accumulate.uses_replica_gradients(self.plan, opt, self.micro_size, split):
            return accumulate.train_step(self.plan, planned, ns, opt, parts, self.sens, self.micro_size, split)
        if not opt.active:
            return train_step(parts, ns)
        return train_step(dataclasses.replace(parts, gradient=opt.gradient), ns)

    # --- building ----------------------------------------------------------------------------------------------
    def _key(self, ns: NetworkState, avals: Sequence[jax.ShapeDtypeStruct]) -> tuple[ProgramKey, list]:
        """The compile cache's key of the step for a batch of ``avals``, and the avals the plan traces."""
        if self.micro_size > 1:  # the plan traces one micro-batch
            accumulate.check_batch([tuple(a.shape) for a in avals], self.micro_size, [1] * len(avals))
            avals = accumulate.micro_avals(avals, self.micro_size)
        return ProgramKey.of("train", ns.structure, avals), list(avals)

    def _planned(self, ns: NetworkState, avals: Sequence[jax.ShapeDtypeStruct],
                 progress: CompileProgress) -> tuple[ProgramKey, Planned]:
        key, avals = self._key(ns, avals)
        return key, self.orchestrator.planned(self.plan, ns, avals, "train", key, progress,
                                              defer_input_checks=True)  # made by _run on each batch

    def _opt_state(self, ns: NetworkState, layout: Layout) -> Any:
        """The optimizer state, created on first use where its shardings say, with no program of its own when
        ``init`` only makes constants (zeros like each parameter, counts: ``placement.initial_state``), else by
        one jitted ``init`` whose outputs land in their shardings (run eagerly, optax's per-leaf ``zeros_like``
        compiled a program per leaf shape and copied every leaf from one device: 0.66 s for the 8-block GPT bench
        model). Trainable parameters still deferred (``no_init_parameters()``) are drawn first, where they live:
        when all of them are, with the state in that same program."""
        if self.optimizer.opt_state is None:
            names, values = ns.param_names(), ns.params.values()
            init = self._transformation().init
            closed, shapes = jax.make_jaxpr(init, return_shape=True)(
                {n: jax.ShapeDtypeStruct(np.shape(v), jnp.result_type(v)) for n, v in zip(names, values)})
            shardings = self._opt_shardings(ns, layout, shapes)
            storage = self.optimizer_sharding(ns, layout).storage
            if values and all(isinstance(v, Deferred) for v in values):
                arrays, state = born(values, storage, lambda drawn: init(dict(zip(names, drawn))), shardings)
                ns.params.write(arrays)
                self.optimizer.opt_state = state
            else:
                if any(isinstance(v, Deferred) for v in values):
                    ns.params.write(place_state(values, storage))
                params = dict(zip(names, ns.params.values()))
                self.optimizer.opt_state = initial_state(init, params, closed, shapes, shardings)
        return self.optimizer.opt_state

    def _opt_shardings(self, ns: NetworkState, layout: Layout, opt_state: Any) -> Any:
        """Optimizer-state leaves that mirror a parameter (momentum, Adam moments) live where it lives."""
        storage = self.optimizer_sharding(ns, layout).storage
        by_name = {n: (np.shape(v), s) for n, v, s in zip(ns.param_names(), ns.params.values(), storage)}
        return state_shardings(opt_state, by_name, layout.state_sharding)

    def _signature(self, ns: NetworkState, layout: Layout, avals: Sequence[Any], opt_state: Any,
                   steps: int | None) -> tuple[StepSignature, tuple]:
        """Shardings and argument avals of the step (``steps``: the sink loop over that many batches)."""
        p_sh = self.optimizer_sharding(ns, layout).storage
        r_sh = [layout.param_sharding(n, tuple(np.shape(v))) for n, v in zip(ns.rest.names(), ns.rest.values())]
        o_sh = self._opt_shardings(ns, layout, opt_state)
        i_sh = [layout.input_sharding(i, tuple(a.shape)) for i, a in enumerate(avals)]
        loss_sh = layout.state_sharding(())
        i_avals = list(avals)
        if steps is not None:
            i_sh, loss_sh = [stacked_sharding(s) for s in i_sh], stacked_sharding(loss_sh)
            i_avals = [jax.ShapeDtypeStruct((steps,) + tuple(a.shape), a.dtype) for a in avals]

        def aval(x, s):
            return jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x), sharding=s)

        arg_avals = ([aval(v, s) for v, s in zip(ns.params.values(), p_sh)],
                     [aval(v, s) for v, s in zip(ns.rest.values(), r_sh)],
                     jax.tree.map(aval, opt_state, o_sh),
                     [aval(a, s) for a, s in zip(i_avals, i_sh)])
        signature = StepSignature((p_sh, r_sh, o_sh, i_sh), (p_sh, r_sh, o_sh, loss_sh), donate_argnums=(0, 1, 2))
        return signature, arg_avals

    def _compiled(self, ns: NetworkState, avals: Sequence[jax.ShapeDtypeStruct], steps: int | None) -> Compiled:
        variant, recipe = "step" if steps is None else f"sink{steps}", self._recipe(ns)
        # the executable the last run used is read while the network is traced and planned (staging.prefetch)
        prefetched = self.orchestrator.prefetch(self.plan, self._key(ns, avals)[0], variant, ns) if recipe else None
        with CompileProgress(self.orchestrator.what) as progress:
            key, planned = self._planned(ns, avals, progress)
            opt_state = self._opt_state(ns, planned.layout)
            signature, arg_avals = self._signature(ns, planned.layout, avals, opt_state, steps)
            step = self._step(planned, ns)
            fn = step if steps is None else sink_loop(step)
            return self.orchestrator.compiled(self.plan, planned, key, variant, fn, signature, arg_avals, progress,
                                              recipe, prefetched)

    def _recipe(self, ns: NetworkState) -> StepRecipe | None:
        """What the step is made of beyond its planned graph and signature, for the executable cache
        (``staging.executables``): this program's and its plan's kinds, the train cell (its type and settings; its
        network is the planned graph), the optimizer (kind, hyperparameters, groups), the sensitivity, the
        micro-batches and the parallel optimizer's configuration; the network's Variables are the step's arguments.
        A train cell or optimizer of the user's own class is not described: XLA's cache alone serves it."""
        return StepRecipe((type(self).__qualname__, type(self.plan).__qualname__, self.train_cell, self.optimizer,
                           self.sens, self.micro_size, self.opt_config), ns.params.holders + ns.rest.holders)

    # --- running -----------------------------------------------------------------------------------------------
    def run_step(self, inputs: Sequence[Any], stacked: bool = False) -> jax.Array:
        """One training step on a global batch; returns the loss (a scalar jax.Array). ``stacked``: ``run_steps``'
        sink loop. A repeat of the last call (the training loop) is answered here by the bound step's one frame."""
        if runtime_checks.pending():  # an earlier step's op check failed (ops.runtime_checks): no device access
            runtime_checks.raise_pending()
        step = checked = self._bound
        if step is not None:
            if step.input_checks:
                _check_batch(step.input_checks, inputs)
            loss = step.repeat(inputs, stacked)
            if loss is not None:
                return loss
        confirmed = revision()  # read before the checks below: a change after them moves it again
        ns = self.state
        step, placed = self._dispatch(ns, inputs, stacked, confirmed)
        if step is not checked:  # another program: its own checks
            _check_batch(step.input_checks, inputs)
        pvals, rvals = self._place_state(ns, step.compiled, placed)
        return step.run(pvals, rvals, placed)

    def run_steps(self, stacked_inputs: Sequence[Any]) -> jax.Array:
        """``len(stacked_inputs[0])`` steps in one device call (sink mode); returns the per-step losses."""
        return TrainProgram.run_step(self, stacked_inputs, stacked=True)  # the loop itself (not a subclass's call)

    def _dispatch(self, ns: NetworkState, inputs: Sequence[Any], stacked: bool,
                  confirmed: tuple[int, int]) -> tuple[BoundStep, list]:
        """The bound step for this call (the last one if its program is this call's, confirmed under the
        revisions ``confirmed``) and the inputs placed."""
        step, context = self._bound, _context.settings()
        if step is not None and step.answers(ns, inputs, stacked, context):
            step.revision = confirmed
            return step, list(inputs)
        avals = self._step_avals(inputs, stacked)
        compiled = self._compiled(ns, avals, len(inputs[0]) if stacked else None)
        placed = self._place(compiled.layout, inputs, avals, stacked)
        self._bound = BoundStep(ns, compiled, stacked, copy.deepcopy(context), input_signature(placed),
                               self.optimizer, self._in_flight, self.MAX_IN_FLIGHT, confirmed,
                               self.input_checks(compiled))
        return self._bound, placed

    def input_checks(self, compiled: Compiled) -> tuple[runtime_checks.InputCheck, ...]:
        """The checks ``compiled`` leaves to the runtime, by position in this program's inputs (the graph's
        batch inputs are the step's inputs here)."""
        graph = compiled.planned.graph
        return graph.input_checks if graph is not None else ()

    def _place_state(self, ns: NetworkState, compiled: Compiled, placed: Sequence[Any]) -> tuple[list, list]:
        """Parameters, other state and optimizer state where ``compiled`` wants them (the first call of a
        program, or a value replaced since the last step: ``set_data``, a checkpoint load, another program's
        layout); values already there are kept as they are. A deleted array among them or the batch is refused
        by name (:class:`~graphpar.errors.DeletedArrayError`)."""
        p_sh, r_sh, o_sh, _ = compiled.in_shardings
        opt_state = self._opt_state(ns, compiled.layout)
        check_live([f"Parameter '{n}'" for n in ns.params.names()], ns.params.values())
        check_live([f"network state '{n}'" for n in ns.rest.names()], ns.rest.values())
        check_live_state(opt_state)
        check_live([f"input {i} of the batch" for i in range(len(placed))], placed)
        ns.params.write(place_state(ns.params.values(), p_sh))
        ns.rest.write(place_state(ns.rest.values(), r_sh))
        self.optimizer.opt_state = jax.tree.map(ensure_placed, opt_state, o_sh)
        return ns.params.values(), ns.rest.values()

    # --- inputs ------------------------------------------------------------------------------------------------
    def _step_avals(self, inputs: Sequence[Any], stacked: bool) -> list[jax.ShapeDtypeStruct]:
        """Global avals of one step's batch (checked against the plan)."""
        avals = [global_aval(x, stacked, i) for i, x in enumerate(inputs)]
        self.plan.check_batch([tuple(a.shape) for a in avals])
        return avals

    def _place(self, layout: Layout, inputs: Sequence[Any], avals: Sequence[Any], stacked: bool) -> list:
        if self.micro_size > 1:
            accumulate.check_batch([tuple(a.shape) for a in avals], self.micro_size,
                                   [accumulate.dim0_split(layout.input_sharding(i, tuple(a.shape)))
                                    for i, a in enumerate(avals)])
        out = []
        for i, (x, a) in enumerate(zip(inputs, avals)):
            sharding = layout.input_sharding(i, tuple(a.shape))
            if stacked:
                sharding = stacked_sharding(sharding)
            out.append(x if isinstance(x, jax.Array) and x.sharding == sharding
                       else put_batch(x, sharding, (len(x),) + tuple(a.shape) if stacked else tuple(a.shape)))
        return out

    def place_inputs(self, inputs: Sequence[Any], stacked: bool = False) -> list[jax.Array]:
        """Put global-batch inputs (numpy or jax) where the plan wants them (tracing and planning first if
        needed)."""
        ns = self.state
        avals = self._step_avals(inputs, stacked)
        with CompileProgress(self.orchestrator.what) as progress:
            _, planned = self._planned(ns, avals, progress)
        return self._place(planned.layout, inputs, avals, stacked)

    # --- inspection --------------------------------------------------------------------------------------------
    def planned(self, inputs: Sequence[Any]) -> Planned:
        """The planned stage of the train step for ``inputs`` (traced and planned if not cached yet)."""
        ns = self.state
        with CompileProgress(self.orchestrator.what) as progress:
            return self._planned(ns, [global_aval(x, index=i) for i, x in enumerate(inputs)], progress)[1]

    def plan_graph(self, inputs: Sequence[Any]) -> Any:
        """The planned graph of the train step for ``inputs`` (None in PYNATIVE_MODE)."""
        return self.planned(inputs).graph

    def lower_step(self, inputs: Sequence[Any]) -> jax.stages.Lowered:
        """The ``jax.stages.Lowered`` train step for ``inputs`` (a fresh lowering: dumps and benchmarks)."""
        return self.lowered(inputs).lowered

    def lowered(self, inputs: Sequence[Any]) -> Lowered:
        """The lowered stage of the train step for ``inputs``, freshly lowered; its ``seconds`` time the lowering
        alone (the optimizer state it needs is made first, outside that time)."""
        ns = self.state
        avals = self._step_avals(inputs, False)
        with CompileProgress(self.orchestrator.what) as progress:
            _, planned = self._planned(ns, avals, progress)
        signature, arg_avals = self._signature(ns, planned.layout, avals, self._opt_state(ns, planned.layout), None)
        return lower(self._step(planned, ns), signature, arg_avals, planned)

    bound = property(lambda self: self._bound, doc="The last call's program bound to the state (None before a step)")

    def input_avals(self) -> list[jax.ShapeDtypeStruct] | None:
        """Global shapes and dtypes of one step's inputs as last run (None before the first step): what
        ``graphpar.parallel.plan(model)`` asks the compile cache for to show the plan ``Model.train`` runs."""
        step = self._bound
        if step is None:
            return None
        return [jax.ShapeDtypeStruct(tuple(s)[1:] if step.stacked else tuple(s), d) for s, d, _ in step.signature]

    def stages(self, inputs: Sequence[Any]) -> ProgramStages:
        """Every stage of the train step for ``inputs`` (each with ``as_text()``); compiles if needed."""
        ns = self.state
        avals = self._step_avals(inputs, False)
        compiled = self._compiled(ns, avals, None)
        lowered = compiled.lowered
        if lowered is None:  # PYNATIVE_MODE (the step runs eagerly) or read from the executable cache: lower it here
            signature, arg_avals = self._signature(ns, compiled.layout, avals,
                                                   self._opt_state(ns, compiled.layout), None)
            lowered = lower(self._step(compiled.planned, ns), signature, arg_avals, compiled.planned)
        return ProgramStages(compiled.planned, lowered, compiled)


def _check_batch(checks: tuple[runtime_checks.InputCheck, ...], inputs: Sequence[Any]) -> None:
    """The checks the program left to the runtime (class labels in range: ``ops.runtime_checks``), made on the
    batch beside the step instead of inside it; a host batch that fails is refused before its step runs."""
    if checks and runtime_checks.check_inputs(checks, inputs):
        runtime_checks.raise_pending()
