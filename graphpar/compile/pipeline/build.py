"""Building a pipelined step's stages: each stage's devices, array placements and compiled programs.

Step 2 of ``compile.pipeline.program`` (see its docstring): given the planned micro-batch graph and its cut into
stages, stage ``s`` gets mesh ``s`` (the ``s``-th group of ``per_stage`` consecutive devices), the shardings its
parameters, state, data and transferred activations have there (the layouts the plan gave them), and its forward,
backward and update programs (``compile.pipeline.stage_programs``). :class:`Built` is everything one batch shape
needs to run, with the schedule's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding

from graphpar.compile.pipeline.schedule import Action
from graphpar.compile.pipeline.stage_programs import stage_programs
from graphpar.compile.pipeline.stage_split import StageGraph, StageSplit
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.ir.graph import Graph
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.planner.mesh import make_mesh
from graphpar.planner.strategy import to_partition_spec


@dataclass
class Stage:
    """One stage's compiled programs and where its arrays live."""

    sg: StageGraph
    mesh: Mesh
    ranks: list[int]
    param_sh: dict[int, NamedSharding]  # param index -> sharding
    rest_sh: dict[int, NamedSharding]
    data_sh: list[NamedSharding]
    value_sh: dict[int, NamedSharding]  # received or sent value id -> its sharding on this stage's mesh
    fwd: Any
    bwd: Any
    update: Any
    zeros: Any
    compiled: dict[str, Any] = field(default_factory=dict)
    hlo: dict[str, str] = field(default_factory=dict)


@dataclass
class Built:
    graph: Graph
    split: StageSplit
    stages: list[Stage]
    ticks: list[list[Action]]
    orders: list[list[Action]]
    dumped: bool = False
    opt_template: Any = None  # the optimizer's one state, abstract (how the stages' states are put together)


def spec_sharding(mesh: Mesh, spec: Any, ndim: int) -> NamedSharding:
    return NamedSharding(mesh, to_partition_spec(spec if spec is not None else tuple(() for _ in range(ndim))))


def build_stages(graph: Graph, split: StageSplit, ns: NetworkState, devices: Sequence[jax.Device], per_stage: int,
                 optimizer: Optimizer, sens: float) -> list[Stage]:
    """Every stage of ``split`` (cut from the planned ``graph``) placed on its ``per_stage`` devices of
    ``devices`` and compiled."""
    sizes = graph.plan.mesh.sizes
    k = per_stage
    specs = graph.plan.value_specs
    n_params = len(ns.params.values())
    stages = []
    for sg in split.stages:
        mesh = make_mesh(devices[sg.stage * k:(sg.stage + 1) * k], [sizes])
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
        fwd, bwd, update, zeros = stage_programs(graph, sg, mesh, [ns.param_names()[i] for i in sg.params],
                                                 optimizer.transformation(), sens)
        stages.append(Stage(sg, mesh, list(range(sg.stage * k, (sg.stage + 1) * k)), param_sh, rest_sh, data_sh,
                            value_sh, fwd, bwd, update, zeros))
    return stages
