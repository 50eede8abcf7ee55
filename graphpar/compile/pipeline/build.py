"""Building a pipelined step's stages: each stage's devices, array placements and compiled programs.

Step 2 of ``compile.pipeline.program`` (see its docstring): given the planned micro-batch graph and its cut into
stages, stage ``s`` gets mesh ``s`` (the ``s``-th group of ``per_stage`` consecutive devices), the shardings its
parameters, state, data and transferred activations have there (the layouts the plan gave them), and its forward,
backward and update programs (``compile.pipeline.stage_programs``). :class:`Built` is everything one batch shape
needs to run, with the schedule's order.

Each stage program goes through the same stages as any program (``staging.stages``): the stage's graph is a
:class:`~graphpar.compile.plans.planned.Planned` (its :class:`StageLayout`: where the stage's arrays live), and on
its first call each program is lowered (a :class:`~graphpar.compile.staging.stages.Lowered`) for the arguments it
is called with and compiled by XLA (a :class:`~graphpar.compile.staging.stages.Compiled`, kept in the pipeline's
compile cache and counted there); every call runs that executable.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.lowering.recompute import compiler_options
from graphpar.compile.pipeline.processes import stage_processes
from graphpar.compile.pipeline.schedule import Action, VirtualLayout
from graphpar.compile.pipeline.schedule_cost import ScheduleCosts, schedule_timeline
from graphpar.compile.pipeline.stage_programs import ResidualTree, stage_programs
from graphpar.compile.pipeline.stage_split import StageGraph, StageSplit
from graphpar.compile.pipeline.transfer import Links
from graphpar.compile.plans.layout import Layout
from graphpar.compile.plans.planned import Planned
from graphpar.compile.staging.cache import ProgramCache, ProgramKey
from graphpar.compile.staging.stages import Compiled, Lowered, StepSignature
from graphpar.compile.staging.xla_cache import use_persistent_cache
from graphpar.dump.pipeline import ScheduleDescription, StageDescription
from graphpar.ir.graph import Graph
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.planner.mesh import make_mesh
from graphpar.planner.strategy import to_partition_spec


class StageLayout(Layout):
    """Where one stage's arrays live on its mesh: its parameters and state by name, its batch inputs by index
    (the layouts the plan gave them); anything else replicated."""

    def __init__(self, mesh: Mesh, named: dict[str, NamedSharding], inputs: dict[int, NamedSharding]):
        self.mesh, self._named, self._inputs = mesh, named, inputs

    def param_sharding(self, name, shape):
        return self._named.get(name) or self.state_sharding(shape)

    def state_sharding(self, shape):
        return NamedSharding(self.mesh, PartitionSpec())

    def input_sharding(self, index, shape):
        return self._inputs.get(index) or self.state_sharding(shape)


COSTS = ScheduleCosts()  # the cost model of the idle fractions the schedule dump shows

PROGRAM_KINDS = ("forward", "backward", "update", "zeros", "backward_input", "backward_weight")  # of one stage


@dataclass
class Stage:
    """One stage's programs and where its arrays live."""

    sg: StageGraph
    mesh: Mesh
    ranks: list[int]
    param_sh: dict[int, NamedSharding]  # param index -> sharding
    rest_sh: dict[int, NamedSharding]
    data_sh: list[NamedSharding]
    value_sh: dict[int, NamedSharding]  # received or sent value id -> its sharding on this stage's mesh
    planned: Planned  # the stage's graph and layout
    jitted: dict[str, Any]  # kind -> the jitted program (``PROGRAM_KINDS``)
    residuals: ResidualTree  # how the forward's returned residuals and the parameters make its VJP
    owned: bool = True  # whether this process runs the stage (owns some or all of its devices)
    compiled: dict[str, Compiled] = field(default_factory=dict)  # kind -> its compiled stage, once called

    def hlo(self) -> str:
        """The compiled HLO of the stage's forward, backward and update programs (those that ran; the split
        backward's two programs when they ran)."""
        split = tuple(kind for kind in ("backward_input", "backward_weight") if kind in self.compiled)
        return "\n".join(self.compiled[kind].as_text() if kind in self.compiled else ""
                         for kind in ("forward", "backward", "update") + split)


@dataclass
class Built:
    """Everything one batch shape needs to run (``key``: its compile key, under which its stage programs are
    cached)."""

    key: ProgramKey
    graph: Graph
    split: StageSplit
    stages: list[Stage]
    ticks: list[list[Action]]
    orders: list[list[Action]]
    layout: VirtualLayout | None = None  # None: one chunk per stage
    dumped: bool = False
    opt_template: Any = None  # the optimizer's one state, abstract (how the stages' states are put together)
    links: Links = field(default_factory=Links)  # the transfer programs between stages of different processes

    @property
    def virtual(self) -> VirtualLayout:
        return self.layout or VirtualLayout(len(self.orders))

    def description(self) -> ScheduleDescription:
        """What the pipeline dumps show of it: actions named with their segment when stages hold several, and
        each stage's idle fraction under the default cost model (``schedule_cost``)."""
        lay = self.virtual
        timeline = schedule_timeline(self.orders, lay, COSTS)
        return ScheduleDescription(
            self.graph, tuple(StageDescription(st.sg.stage, tuple(st.ranks), st.sg.graph) for st in self.stages),
            tuple(tuple(a.label(lay.virtual) for a in order) for order in self.orders),
            tuple(tuple((a.stage, a.label(lay.virtual)) for a in tick) for tick in self.ticks),
            {n: lay.place(c)[0] for n, c in self.split.node_stage.items()}, self.split.param_stage,
            tuple(lay.place(c) for c in range(lay.chunks)) if lay.virtual else (), timeline.idle,
            f"F={COSTS.f:g} B={COSTS.b:g} W={COSTS.w:g} per stage, 1/{lay.segments} of that per segment")


def spec_sharding(mesh: Mesh, spec: Any, ndim: int) -> NamedSharding:
    return NamedSharding(mesh, to_partition_spec(spec if spec is not None else tuple(() for _ in range(ndim))))


def build_stages(graph: Graph, split: StageSplit, ns: NetworkState, devices: Sequence[jax.Device], per_stage: int,
                 optimizer: Optimizer, sens: float, layout: VirtualLayout | None = None,
                 donate_gradients: bool = True) -> list[Stage]:
    """Every stage (chunk) of ``split`` (cut from the planned ``graph``) placed on its group's ``per_stage`` devices
    of ``devices`` and compiled; ``owned`` when this process owns (some of) its group's devices;
    ``donate_gradients``: whether each update takes the accumulated gradients' buffers."""
    layout = layout or VirtualLayout(len(split.stages))
    sizes = graph.plan.mesh.sizes
    k = per_stage
    specs = graph.plan.value_specs
    n_params = len(ns.params.values())
    owners = stage_processes(devices, layout.stages, per_stage)  # by device group
    stages = []
    for sg in split.stages:
        group = layout.place(sg.stage)[0]
        mesh = make_mesh(devices[group * k:(group + 1) * k], [sizes])
        ins = graph.inputs
        param_sh = {i: spec_sharding(mesh, specs.get(ins[i]), len(graph.values[ins[i]].shape)) for i in sg.params}
        rest_sh = {i: spec_sharding(mesh, specs.get(ins[n_params + i]),
                                    len(graph.values[ins[n_params + i]].shape)) for i in sg.rest}
        data_vids = graph.inputs[n_params + len(ns.rest.values()):]
        data_sh = [spec_sharding(mesh, specs.get(data_vids[i]), len(graph.values[data_vids[i]].shape))
                   for i in sg.data]
        value_sh = {}
        for vid in list(sg.received) + list(sg.sent):
            producer = graph.nodes[graph.values[vid].producer]
            spec = producer.strategy.output_spec(producer.outputs.index(vid)) if producer.strategy else None
            value_sh[vid] = spec_sharding(mesh, spec, len(graph.values[vid].shape))
        names = ns.param_names() + ns.rest.names()
        named = {names[i]: param_sh[i] for i in sg.params}
        named.update({names[n_params + i]: rest_sh[i] for i in sg.rest})
        planned = Planned(sg.graph, StageLayout(mesh, named, dict(zip(sg.data, data_sh))), "train")
        residuals, programs = stage_programs(graph, sg, mesh, [ns.param_names()[i] for i in sg.params],
                                             optimizer.transformation(), sens, donate_gradients)
        stages.append(Stage(sg, mesh, list(range(group * k, (group + 1) * k)), param_sh, rest_sh, data_sh,
                            value_sh, planned, dict(zip(PROGRAM_KINDS, programs)), residuals,
                            owned=jax.process_index() in owners[group]))
    return stages


def stage_compiled(cache: ProgramCache, key: ProgramKey, st: Stage, kind: str, args: Sequence[Any]) -> Compiled:
    """Program ``kind`` of stage ``st`` lowered for ``args`` (its first call's arguments: their shardings are
    where the schedule keeps them) and compiled, once per (key, stage, kind); counted in ``cache``. A stage program
    that recomputes gets the same per-compilation XLA options as a whole recomputing program
    (``recompute.compiler_options``: XLA:CPU's memory-optimized scheduler), so per-stage recompute saves memory."""
    found = st.compiled.get(kind)
    if found is not None:
        return found
    jitted = st.jitted[kind]

    def build() -> Compiled:
        started, cpu = time.perf_counter(), time.process_time()
        traced = jitted.trace(*args)
        signature = StepSignature(jax.tree.map(_sharding_of, tuple(args)), None, traced.donate_argnums)
        options = compiler_options(st.mesh.devices.flat[0].platform, traced.jaxpr)
        lowered = Lowered(st.planned, traced.lower(), signature, time.perf_counter() - started,
                          time.process_time() - cpu, compiler_options=options)
        cache.count("lowerings")
        use_persistent_cache(f"pipeline stage {st.sg.stage} {kind}",
                             tuple(sorted({type(e).__name__ for e in traced.jaxpr.effects})))
        started = time.perf_counter()
        executable = lowered.compile()
        cache.count("compiles")
        seconds = {"lowering": lowered.seconds, "XLA compile": time.perf_counter() - started}
        return Compiled(st.planned, signature, executable, executable, seconds, jitted, lowered)

    compiled, _ = cache.compiled.get_or_build((key, f"stage{st.sg.stage} {kind}"), build)
    st.compiled[kind] = compiled
    return compiled


def _sharding_of(x: Any) -> Any:
    return x.sharding if isinstance(x, jax.Array) else None
