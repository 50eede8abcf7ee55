"""The SEMI_AUTO / AUTO / HYBRID parallel plan: trace, plan with the pass pipeline, lower with pinned layouts.

What is particular to these modes, for ``compile.orchestrate`` (which traces, runs the passes and dumps for every
plan): ``setup`` chooses the mesh from the user's device matrices (one global ``jax.sharding.Mesh`` per plan) and
the dataset layouts of the inputs; ``layout`` reads the storage layouts the passes chose. The objective is the
planned graph evaluated by ``compile.interpret`` with every layout pinned — the loss of the *global* batch, whose
gradient is the gradient of the loss the user wrote (see docs/porting_from_mindspore.md for how this relates to
MindSpore's ``gradients_mean``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from graphpar import _context
from graphpar._context import AutoParallelContext, ParallelMode
from graphpar._logging import notice_once
from graphpar.compile.plans.layout import GraphLayout, Layout, UniformLayout
from graphpar.communication.devices import local_ranks
from graphpar.compile.plans.execution import ExecutionPlan, PlanSetup
from graphpar.errors import ConfigError
from graphpar.ir.graph import Graph
from graphpar.planner import strategy_file
from graphpar.planner.memory_model import graph_optimizer_slots
from graphpar.planner.mesh import make_mesh, mesh_axis_sizes
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.search.settings import search_settings
from graphpar.planner.strategy import MeshInfo, Spec, strategy_text


def _hint_matrices(graph: Graph, ctx_dims, n: int) -> list[tuple[str, tuple[int, ...]]]:
    """Device matrices (with repeat) of the user's hints, to choose a mesh that can express all of them."""
    out = []
    for node in graph.node_list():
        if node.hint is None:
            continue
        dims = ctx_dims(node, graph)
        if dims is None or len(node.hint) != len(dims.inputs):
            continue
        splits: dict[str, int] = {}
        for row, entry in zip(dims.inputs, node.hint):
            for label, s in zip(row, entry):
                if label is not None and s > 1:
                    splits[label] = s
        core = [splits.get(l, 1) for l in dims.order]
        total = int(np.prod(core)) if core else 1
        if total and n % total == 0:
            repeat = [n // total] if total < n else []
            matrix = tuple(repeat + core if dims.repeat_first else core + repeat)
            out.append((f"'{node.instance_name}' {strategy_text(node.hint)} ({node.scope})", matrix))
    return out


def dataset_specs(graph: Graph, mesh: MeshInfo, dataset_strategy: Any) -> dict[int, Spec]:
    """The layout each graph input arrives in: split over the devices by ``dataset_strategy``."""
    inputs = [v for v in graph.inputs if graph.values[v].kind == "input"]
    api = "set_auto_parallel_context"
    if isinstance(dataset_strategy, tuple) and len(dataset_strategy) != len(inputs):
        raise ConfigError(api, "dataset_strategy", dataset_strategy,
                          reason=f"dataset_strategy has {len(dataset_strategy)} entries but the network takes "
                                 f"{len(inputs)} inputs")
    specs: dict[int, Spec] = {}
    for k, vid in enumerate(inputs):
        shape = graph.values[vid].shape
        if isinstance(dataset_strategy, tuple):
            splits = dataset_strategy[k]
            if len(splits) != len(shape):
                raise ConfigError(api, "dataset_strategy", dataset_strategy,
                                  reason=f"entry {k} {splits} does not match input {k}'s rank (shape {shape})")
            names, spec = list(mesh.names), []
            for d, (s, size) in enumerate(zip(splits, shape)):
                taken, acc = [], 1
                while acc < s and names:
                    taken.append(names.pop(0))
                    acc *= mesh.size(taken[-1:])
                if acc != s or size % s:
                    raise ConfigError(api, "dataset_strategy", dataset_strategy,
                                      reason=f"input {k} dim {d} (size {size}) cannot be split {s} on "
                                             f"{mesh.n_devices} devices")
                spec.append(tuple(taken))
            specs[vid] = tuple(spec)
        elif dataset_strategy == "full_batch" or not shape:
            specs[vid] = tuple(() for _ in shape)
        else:
            names = list(mesh.names)
            while names and shape[0] % mesh.size(tuple(names)):
                names.pop()
            specs[vid] = (tuple(names),) + tuple(() for _ in shape[1:])
    return specs


class PlannedPlan(ExecutionPlan):
    name = "planned"

    def __init__(self, network: Any, devices: Sequence[jax.Device], pctx: AutoParallelContext,
                 n_virtual: int | None = None, optimizer: Any = None):
        super().__init__()
        self.network = network
        self.optimizer = optimizer  # the train step's (memory predictions count its state), None for a forward
        self.devices = list(devices)
        self.pctx = pctx
        self._n = n_virtual or len(self.devices)
        self.pynative = n_virtual is not None
        local = local_ranks(self.devices)
        self.draws = self._n if self.pynative else len(local)
        self.first_rank = 0 if self.pynative else local[0]
        self.info: MeshInfo | None = None  # the plan's one mesh, fixed by the first graph planned
        one = SingleDeviceSharding(self.devices[0])
        self._one_device = UniformLayout(one, one)
        if pctx.parallel_mode == ParallelMode.HYBRID_PARALLEL:
            notice_once("hybrid", "HYBRID_PARALLEL is planned as SEMI_AUTO_PARALLEL (hinted ops keep their "
                        "strategies, the others get data parallel)")

    @property
    def n(self) -> int:
        return self._n

    def setup(self, graph: Graph) -> PlanSetup:
        probe = PlanContext(MeshInfo(("m0",), (self.n,)), self.pctx.parallel_mode, self.pctx.search_mode)
        hinted = _hint_matrices(graph, probe.dims, self.n)
        sizes = mesh_axis_sizes(self.n, [m for _, m in hinted], [o for o, _ in hinted])
        info = MeshInfo(tuple(f"m{i}" for i in range(len(sizes))), sizes)
        if self.info is not None and self.info != info:
            raise ConfigError("set_auto_parallel_context", "parallel_mode", self.pctx.parallel_mode,
                              reason="the network's strategies need a different device mesh for another input "
                                     "shape or training mode; graphpar keeps one mesh per program")
        if self.info is None:
            self.info, self.mesh = info, make_mesh(self.devices, [sizes])
        ctx = PlanContext(info, self.pctx.parallel_mode, self.pctx.search_mode)
        ctx.input_specs = dataset_specs(graph, info, self.pctx.dataset_strategy)
        ctx.strategy_file = strategy_file.for_plan(self.pctx)
        ctx.search = search_settings(self.pctx.parallel_mode, self.pctx.search_mode,
                                     _context.current().max_device_memory, self.devices[0].platform)
        ctx.optimizer_slots = graph_optimizer_slots(graph, self.optimizer)
        return PlanSetup(ctx)

    def layout(self, graph: Graph | None) -> Layout:
        if graph is None or self.mesh is None:
            return self._one_device
        specs = graph.meta["value_specs"]
        return GraphLayout(self.mesh, {(graph.values[v].kind, graph.values[v].name): specs[v]
                                       for v in graph.inputs if v in specs})

    def _mesh_for_pins(self):
        return self.mesh


def planned_plan(network, devices, pctx, n_virtual=None, optimizer=None) -> PlannedPlan:
    return PlannedPlan(network, devices, pctx, n_virtual, optimizer)
