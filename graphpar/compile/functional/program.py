"""The compiled program of a functional step: ``Model.train``'s train program, built from a captured step.

:class:`FunctionalProgram` is a ``runtime.program.TrainProgram`` whose network is the step's
``objective.StepObjective`` (the differentiated function as a Cell holding every Cell the step reaches) and whose
optimizer is the one the step calls. Everything that makes ``Model.train``'s step is therefore the same: the plan
chosen for the settings in force (``plans.choose``), the graph traced and planned by the orchestrator
(``planner.planning.plan_graph``: the same shard() hints, dumps and strategy files), the optimizer state made in
its shardings, the arguments placed, donated and bound (``runtime.bound_step``), the results written back into the
Parameters and the optimizer. What differs is the step's body (``functional.step``: the user's step function run on
the program's arguments) and its signature: its inputs are the step function's (each placed where the planned
graph wants the gradient call's argument it is, else replicated), its outputs what the step function returns
(replicated, as ``Model.train``'s loss).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from graphpar import _context
from graphpar.compile.functional.capture import CapturedStep
from graphpar.compile.functional.objective import objective_cell
from graphpar.compile.functional.step import functional_step, returns_nothing
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.lowering.recompute import advise_cpu_scheduler
from graphpar.compile.plans.choose import choose_plan
from graphpar.compile.plans.layout import Layout
from graphpar.compile.plans.planned import Planned
from graphpar.compile.runtime.placement import ensure_placed, global_aval, put_batch
from graphpar.compile.runtime.program import TrainProgram, TrainSettings
from graphpar.compile.runtime.skeleton import Program
from graphpar.compile.staging.cache import ProgramKey
from graphpar.compile.staging.progress import CompileProgress
from graphpar.compile.staging.stages import Compiled, StepSignature
from graphpar.errors import JitError
from graphpar.ops import runtime_checks
from graphpar.ir.recorder import cell_scope
from graphpar.planner.optimizer_parallel import OptimizerParallelConfig


def _auxiliary(model: Any, inputs: Sequence[Any]) -> Any:
    """How the auxiliary-output graph calls the objective Cell (scoped from Default, as its loss graph is)."""
    with cell_scope("Default"):
        return model.auxiliary(*inputs)


class FunctionalProgram(TrainProgram):
    """The compiled steps of one captured step function, one per (structure, input signature, settings)."""

    def __init__(self, captured: CapturedStep):
        spec = captured.spec
        network = objective_cell(spec.fn, spec.has_aux, captured.cells, captured.loose, captured.name, spec.name)
        Program.__init__(self, f"{captured.name} step", network)
        self.captured = captured
        self.optimizer = captured.optimizer
        self.sens = 1.0
        self._opt_sharding = None
        self._bound = None
        self._in_flight: collections.deque = collections.deque()
        self.network.check_names()
        _ = self.settings  # the plan is chosen when the program is built: settings it refuses are named now

    def read_settings(self) -> TrainSettings:
        pctx = _context.current_parallel()
        if pctx.grad_accumulation_step > 1:
            raise JitError(self.captured.name, f"grad_accumulation_step={pctx.grad_accumulation_step} applies to "
                           "Model.train; a compiled step function takes one gradient per call (accumulate the "
                           "gradients in the step, or train with Model.train)")
        opt_config = OptimizerParallelConfig.from_context(pctx, self.trainable())
        plan = choose_plan(self.network, self.optimizer, compiled=True)  # compiled in PYNATIVE_MODE too
        advise_cpu_scheduler(self.network, plan.devices[0].platform, opt_config.regather_for_backward)
        return TrainSettings(plan, 1, opt_config)

    def _transformation(self) -> optax.GradientTransformation:
        return self.optimizer.transformation()  # what Optimizer.construct applies in the step

    def _recipe(self, ns: NetworkState) -> None:
        """None: the step runs the user's own Python around the traced graph, which no digest can describe, so it
        is not kept in the executable cache (``staging.executables``); XLA's persistent cache serves its compile."""
        return None

    # --- the graph and the step ---------------------------------------------------------------------------------
    def _planned(self, ns: NetworkState, avals: Sequence[jax.ShapeDtypeStruct],
                 progress: CompileProgress) -> tuple[ProgramKey, Planned]:
        key = ProgramKey.of("train", ns.structure, avals)
        graph_avals = list(self.captured.graph_avals)
        return key, self.orchestrator.planned(self.plan, ns, graph_avals, "train", key, progress,
                                              defer_input_checks=self._defers_checks)

    def _step(self, planned: Planned, ns: NetworkState):
        opt = self.optimizer_sharding(ns, planned.layout)
        if opt.active and self.captured.spec.positions:
            raise JitError(self.captured.name, "the parallel optimizer (enable_parallel_optimizer) with gradients "
                           "of the step's inputs is not built; differentiate the weights only (grad_position=None)")
        aux = self.aux_planned(ns)
        if opt.active:
            return functional_step(self.plan, planned, ns, self.captured, aux, opt.gradient)
        return functional_step(self.plan, planned, ns, self.captured, aux)

    def aux_planned(self, ns: NetworkState) -> Planned | None:
        """The forward graph of a ``has_aux`` function's auxiliary outputs, planned on the step's mesh (None when
        they hold no array); built once per compile key and kept in the compile cache, as the step's graph is."""
        if not jax.tree.leaves(self.captured.aux_avals):
            return None
        avals = list(self.captured.graph_avals)
        key = ProgramKey.of("forward", ns.structure, avals, ("auxiliary outputs",))
        with CompileProgress(self.orchestrator.what) as progress:
            return self.orchestrator.planned(self.plan, ns, avals, "forward", key, progress, call=_auxiliary,
                                             defer_input_checks=self._defers_checks)

    @property
    def _defers_checks(self) -> bool:
        """Whether the graphs leave their checks of batch inputs to :meth:`input_checks`: only when every argument
        of the gradient call is one of the step's inputs (a value the step computes has no input to check)."""
        return None not in self.captured.inputs_of_graph

    def input_checks(self, compiled: Compiled) -> tuple[runtime_checks.InputCheck, ...]:
        """The checks the step's graph and its auxiliary outputs' graph leave to the runtime, moved from their
        positions among the gradient call's arguments to the step function's inputs."""
        graphs = [compiled.planned.graph]
        aux = self.aux_planned(self.state)
        if aux is not None:
            graphs.append(aux.graph)
        to_step = self.captured.inputs_of_graph
        checks = {dataclasses.replace(c, input=to_step[c.input]) for g in graphs if g is not None
                  for c in g.input_checks}
        return tuple(sorted(checks, key=lambda c: (c.input, c.site.op)))

    def _input_sharding(self, layout: Layout, index: int, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        """Step input ``index`` where the planned graph wants the gradient call's argument it is; else
        replicated."""
        graph_inputs = self.captured.inputs_of_graph
        if index in graph_inputs:
            return layout.input_sharding(graph_inputs.index(index), shape)
        return layout.state_sharding(shape)

    def _signature(self, ns: NetworkState, layout: Layout, avals: Sequence[Any], opt_state: Any,
                   steps: int | None) -> tuple[StepSignature, tuple]:
        if steps is not None:
            raise JitError(self.captured.name, "a compiled step function runs one step per call (no sink mode)")
        p_sh = self.optimizer_sharding(ns, layout).storage
        r_sh = [layout.param_sharding(n, tuple(np.shape(v))) for n, v in zip(ns.rest.names(), ns.rest.values())]
        o_sh = self._opt_shardings(ns, layout, opt_state)
        i_sh = [self._input_sharding(layout, i, tuple(a.shape)) for i, a in enumerate(avals)]
        out_sh = (layout.state_sharding(()) if returns_nothing(self.captured)
                  else jax.tree.map(lambda a: layout.state_sharding(tuple(a.shape)), self.captured.out_avals))

        def aval(x, s):
            return jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x), sharding=s)

        arg_avals = ([aval(v, s) for v, s in zip(ns.params.values(), p_sh)],
                     [aval(v, s) for v, s in zip(ns.rest.values(), r_sh)],
                     jax.tree.map(aval, opt_state, o_sh),
                     [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(avals, i_sh)])
        signature = StepSignature((p_sh, r_sh, o_sh, i_sh), (p_sh, r_sh, o_sh, out_sh), donate_argnums=(0, 1, 2))
        return signature, arg_avals

    def run_step(self, inputs: Sequence[Any]) -> Any:
        """One call of the step function on ``inputs``: what it returns (its Parameters and optimizer updated)."""
        out = super().run_step(inputs)
        if returns_nothing(self.captured):
            return jax.tree.unflatten(jax.tree.structure(self.captured.out_avals), [])
        return out

    # --- inputs ------------------------------------------------------------------------------------------------
    def _step_avals(self, inputs: Sequence[Any], stacked: bool) -> list[jax.ShapeDtypeStruct]:
        avals = [global_aval(x, stacked) for x in inputs]
        graph_inputs = [i for i in self.captured.inputs_of_graph if i is not None]
        self.plan.check_batch([tuple(avals[i].shape) for i in graph_inputs])
        return avals

    def _place(self, layout: Layout, inputs: Sequence[Any], avals: Sequence[Any], stacked: bool) -> list:
        """A batch the differentiated function receives is placed as ``Model.train``'s batch is (a process's rows
        of the global batch in a multi-process job); any other input is a value every process holds whole."""
        out = []
        for i, (x, a) in enumerate(zip(inputs, avals)):
            sharding = self._input_sharding(layout, i, tuple(a.shape))
            if isinstance(x, jax.Array) and x.sharding == sharding:
                out.append(x)
            else:
                out.append(put_batch(x, sharding) if i in self.captured.inputs_of_graph else ensure_placed(x, sharding))
        return out
