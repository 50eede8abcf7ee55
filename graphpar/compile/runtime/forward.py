"""The compiled forward call: ``net(x)`` at top level in GRAPH_MODE, ``Model.eval`` and ``Model.predict``.

Same machinery as the train step without gradients: the network's state is split, the orchestrator traces, plans,
lowers and compiles one program per (structure, call signature, context), and the program returns global arrays in
the planned layouts. Array arguments (``jax.Array``, numpy) are the program's inputs; any other argument (a Python
number, a string) is a constant of the traced program and part of its key, as MindSpore treats them in graph mode.
State the call updates (BatchNorm statistics of a Cell in training mode) is written back into the network; in
evaluation mode nothing changes, and nothing is written.

A Cell called with tracers (inside ``jax.grad``, ``ops.GradOperation``, a traced step), or whose parameters are
tracers, runs inline; so does a Cell holding an optimizer (a custom training Cell), which Model runs as written.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from graphpar import _context
from graphpar.common.deferred import Deferred
from graphpar.compile.lowering import recompute
from graphpar.compile.lowering.graph_trace import call_network
from graphpar.compile.plans.choose import choose_plan
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.global_batch import gather_process_rows
from graphpar.compile.plans.planned import Planned
from graphpar.compile.runtime.placement import born_in_place, global_aval, put_batch
from graphpar.compile.runtime.skeleton import Program
from graphpar.compile.staging.cache import ProgramKey
from graphpar.compile.staging.orchestrate import lower
from graphpar.compile.staging.progress import CompileProgress
from graphpar.compile.staging.stages import Compiled, Lowered, StepSignature
from graphpar.errors import DatasetError
from graphpar.ir.recorder import cell_scope
from graphpar.nn.cell import Cell
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.ops import runtime_checks


def _is_input(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


@dataclass(frozen=True)
class _Call:
    """One call's arguments split into array inputs and the static rest."""

    inputs: list[Any]
    statics: tuple  # (position, value) of the non-array leaves
    treedef: Any

    @staticmethod
    def of(args: tuple, kwargs: dict) -> "_Call":
        leaves, treedef = jax.tree.flatten((args, kwargs))
        return _Call([x for x in leaves if _is_input(x)],
                     tuple((i, x) for i, x in enumerate(leaves) if not _is_input(x)), treedef)

    def rebuild(self, inputs: Sequence[Any]) -> tuple[tuple, dict]:
        it, statics = iter(inputs), dict(self.statics)
        leaves = [statics[i] if i in statics else next(it) for i in range(self.treedef.num_leaves)]
        return jax.tree.unflatten(self.treedef, leaves)

    def network_call(self):
        def call(model, xs):
            args, kwargs = self.rebuild(xs)
            return call_network(model, args) if not kwargs else _call_with_kwargs(model, args, kwargs)

        return call


def _call_with_kwargs(model: Any, args: tuple, kwargs: dict) -> Any:
    with cell_scope("Default"):
        return model(*args, **kwargs)


@dataclass(frozen=True)
class ForwardSettings:
    """What a forward call reads of the settings (once per compile key, ``runtime.skeleton``): its plan."""

    plan: ExecutionPlan


class ForwardProgram(Program[ForwardSettings]):
    """The compiled forward calls of one Cell."""

    def __init__(self, cell: Cell):
        super().__init__(f"{type(cell).__name__} forward", cell)
        self._copies: tuple[list, list] | None = None  # (network values, their copies in the program's layouts)
        self._memo: tuple[Any, Compiled] | None = None  # (what the last call looked like, its program)

    @property
    def cell(self) -> Cell:
        return self.network

    def read_settings(self) -> ForwardSettings:
        return ForwardSettings(choose_plan(self.network))

    @property
    def plan(self) -> ExecutionPlan:
        return self.settings.plan

    # --- building ----------------------------------------------------------------------------------------------
    def _input_shardings(self, planned: Planned, avals: Sequence[Any]) -> tuple[list, bool]:
        """The planned input shardings, or replicated ones when the plan cannot split this batch (a last
        partial batch in evaluation)."""
        shapes = [tuple(a.shape) for a in avals]
        try:
            self.plan.check_batch(shapes)
            return [planned.layout.input_sharding(i, s) for i, s in enumerate(shapes)], False
        except DatasetError:
            mesh = planned.layout.mesh
            if mesh is None:
                return [planned.layout.input_sharding(i, ()) for i in range(len(shapes))], True
            return [NamedSharding(mesh, PartitionSpec()) for _ in shapes], True

    def _compiled(self, call: _Call) -> Compiled:
        ns, plan = self.state, self.plan
        avals = [global_aval(x, index=i) for i, x in enumerate(call.inputs)]
        key = ProgramKey.of("forward", ns.structure, avals, (call.treedef, call.statics))
        with CompileProgress(self.orchestrator.what) as progress:
            planned = self.orchestrator.planned(plan, ns, avals, "forward", key, progress, call.network_call(),
                                                defer_input_checks=True)  # made by call() on each batch
            if planned.graph is not None and recompute.recomputes_in_backward(planned.graph):
                recompute.advise_cpu_scheduler(self.network, plan.devices[0].platform)
            i_sh, replicated = self._input_shardings(planned, avals)
            layout = planned.layout
            r_sh = [layout.param_sharding(n, tuple(np.shape(v))) for n, v in zip(ns.rest.names(), ns.rest.values())]
            changed = self._changed(planned, len(r_sh))

            def forward(rvals, inputs):
                outs, new_rest = plan.forward(planned, ns, ns.params.unflatten([]), ns.rest.unflatten(rvals), inputs)
                new = jax.tree.leaves(new_rest)
                return outs, [new[j] for j in changed]

            signature = StepSignature((r_sh, i_sh), (None, [r_sh[j] for j in changed]))
            arg_avals = ([jax.ShapeDtypeStruct(np.shape(v), jax.numpy.result_type(v), sharding=s)
                          for v, s in zip(ns.rest.values(), r_sh)],
                         [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s) for a, s in zip(avals, i_sh)])
            return self.orchestrator.compiled(plan, planned, key, "replicated" if replicated else "call",
                                              forward, signature, arg_avals, progress)

    @staticmethod
    def _changed(planned: Planned, n_rest: int) -> list[int]:
        """Indices of the state leaves the call can change (all of them in PYNATIVE_MODE, where nothing is
        traced); in a traced graph a leaf the call leaves alone is its own input."""
        if planned.graph is None:
            return list(range(n_rest))
        graph, n_out = planned.graph, planned.out_treedef.num_leaves
        return [j for j in range(n_rest) if graph.outputs[n_out + j] != graph.inputs[j]]

    # --- running -----------------------------------------------------------------------------------------------
    def _state_values(self, compiled: Compiled) -> list:
        """The network's state in the program's layouts: the values themselves, or copies when another program
        (the train step) keeps them elsewhere — never moving the originals."""
        values = self.state.rest.values()
        if any(isinstance(v, Deferred) for v in values):  # no_init_parameters(): drawn where this program wants them
            values = born_in_place(values, compiled.in_shardings[0])
            self.state.rest.write(values)
        copies = self._copies
        if copies is not None and len(copies[0]) == len(values) and all(a is b for a, b in zip(values, copies[0])):
            return copies[1]
        placed = [v if isinstance(v, jax.Array) and v.sharding == s else jax.device_put(v, s)
                  for v, s in zip(values, compiled.in_shardings[0])]
        self._copies = (values, placed)
        return placed

    def _place(self, compiled: Compiled, inputs: Sequence[Any]) -> list:
        out = []
        for i, (x, s) in enumerate(zip(inputs, compiled.in_shardings[1])):
            if isinstance(x, jax.Array) and x.sharding == s:
                out.append(x)
                continue
            # input i's global shape: this process's rows stacked, or its block where dataset_strategy puts it
            shape = tuple(global_aval(x, index=i).shape)
            if s.is_fully_replicated and jax.process_count() > 1:  # every process needs it all
                whole = np.asarray(x) if shape == np.shape(x) else gather_process_rows(np.asarray(x))
                out.append(jax.device_put(whole, s))
            else:
                out.append(put_batch(x, s, shape))
        return out

    def _program(self, call: _Call) -> Compiled:
        """The compiled program for this call: the last call's when nothing that keys it changed (an
        evaluation loop), else the cache's."""
        ns = self.state
        looks = (ns, _context.compile_key(), call.treedef, call.statics,
                 tuple((np.shape(x), x.dtype) for x in call.inputs))
        memo = self._memo
        if memo is not None and memo[0][0] is ns and memo[0][1:] == looks[1:]:
            return memo[1]
        compiled = self._compiled(call)
        self._memo = (looks, compiled)
        return compiled

    def call(self, args: tuple, kwargs: dict) -> Any:
        """``cell(*args, **kwargs)`` through the compiled program."""
        if runtime_checks.pending():  # an earlier call's op check failed (ops.runtime_checks): no device access
            runtime_checks.raise_pending()
        call = _Call.of(args, kwargs)
        compiled = self._program(call)
        graph = compiled.planned.graph
        if graph is not None and graph.input_checks:  # labels out of range: checked beside the call, not in it
            if runtime_checks.check_inputs(graph.input_checks, call.inputs):
                runtime_checks.raise_pending()
        outs, new_rest = compiled(self._state_values(compiled), self._place(compiled, call.inputs))
        self._write_back(self._changed(compiled.planned, len(compiled.in_shardings[0])), new_rest)
        return outs

    def _write_back(self, changed: list[int], new_rest: list) -> None:
        if not changed:
            return
        ns = self.state
        values = ns.rest.values()
        for j, v in zip(changed, new_rest):
            values[j] = v
        ns.rest.write(values)

    def __call__(self, *inputs: Any) -> Any:
        return self.call(inputs, {})

    def planned(self, *inputs: Any) -> Planned:
        """The planned forward graph for these inputs (trace and plan if needed)."""
        return self._compiled(_Call.of(inputs, {})).planned

    def lower(self, *inputs: Any) -> jax.stages.Lowered:
        """The ``jax.stages.Lowered`` of the forward for ``inputs`` (``.compile().as_text()`` shows the
        collectives): the one the program was compiled from (in PYNATIVE_MODE, a lowering made now)."""
        call = _Call.of(inputs, {})
        compiled = self._compiled(call)
        if compiled.lowered is not None:
            return compiled.lowered.lowered
        ns = self.state
        arg_avals = ([jax.ShapeDtypeStruct(np.shape(v), jax.numpy.result_type(v), sharding=s)
                      for v, s in zip(ns.rest.values(), compiled.in_shardings[0])],
                     [jax.ShapeDtypeStruct(np.shape(x), jax.numpy.result_type(x), sharding=s)
                      for x, s in zip(call.inputs, compiled.in_shardings[1])])
        lowered: Lowered = lower(compiled.fn, compiled.signature, arg_avals, compiled.planned)
        return lowered.lowered


_programs: "weakref.WeakKeyDictionary[Cell, ForwardProgram]" = weakref.WeakKeyDictionary()


def program_for(cell: Cell) -> ForwardProgram:
    """The forward program of ``cell`` (one per Cell: ``net(x)``, ``Model.eval`` and ``Model.predict`` share
    it)."""
    program = _programs.get(cell)
    if program is None:
        program = _programs[cell] = ForwardProgram(cell)
    return program


def _runs_inline(cell: Cell) -> bool:
    """A Cell holding an optimizer (a custom training Cell), or one whose parameters are being traced."""
    if any(isinstance(sub, Optimizer) for _, sub in cell.cells_and_names()):
        return True
    return any(isinstance(p.get_raw_value(), jax.core.Tracer) for p in cell.get_parameters())


def run_compiled(cell: Cell, args: tuple, kwargs: dict) -> Any:
    """A top-level GRAPH_MODE call of ``cell``: the compiled forward (or inline, see the module docstring)."""
    program = _programs.get(cell)
    if program is None and _runs_inline(cell):
        return cell.construct(*args, **kwargs)
    program = program or program_for(cell)
    if any(isinstance(v, jax.core.Tracer) for v in program.state.rest.values()):
        return cell.construct(*args, **kwargs)
    return program.call(args, kwargs)
