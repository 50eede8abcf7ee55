"""The SEMI_AUTO / AUTO / HYBRID parallel plan: trace, plan with the pass pipeline, lower with pinned layouts.

What is particular to these modes, for ``compile.orchestrate`` (which traces, runs the passes and dumps for every
plan): ``request`` asks the planner for the mesh chosen from the user's device matrices (one global
``jax.sharding.Mesh`` per plan, fixed by the first graph planned) and the dataset layouts of the inputs; ``layout``
reads the storage layouts the passes chose. The objective is the
planned graph evaluated by ``compile.interpret`` with every layout pinned — the loss of the *global* batch, whose
gradient is the gradient of the loss the user wrote (see docs/porting_from_mindspore.md for how this relates to
MindSpore's ``gradients_mean``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import SingleDeviceSharding

from graphpar import _context
from graphpar._context import AutoParallelContext, ParallelMode
from graphpar._logging import notice_once
from graphpar.compile.plans.layout import GraphLayout, Layout, UniformLayout
from graphpar.communication.devices import local_ranks
from graphpar.common.placeholder import has_dynamic
from graphpar.compile.plans.dynamic import signature_label, signature_record
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.op_strategies import plan_cell
from graphpar.ir.graph import Graph
from graphpar.nn.cell import Cell
from graphpar.planner import strategy_file
from graphpar.planner.memory_model import graph_optimizer_slots
from graphpar.planner.mesh import make_mesh
from graphpar.planner.passes.context import PlanRequest
from graphpar.planner.search.settings import search_settings
from graphpar.planner.strategy import MeshInfo


class SemiAutoPlan(ExecutionPlan):
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
        # the plan's one mesh, fixed by the first graph planned: a program's graphs share their arrays' shardings
        self.info: MeshInfo | None = None
        one = SingleDeviceSharding(self.devices[0])
        self._one_device = UniformLayout(one, one)
        if pctx.parallel_mode == ParallelMode.HYBRID_PARALLEL:
            notice_once("hybrid", "HYBRID_PARALLEL is planned as SEMI_AUTO_PARALLEL (hinted ops keep their "
                        "strategies, the others get data parallel)")

    @property
    def n(self) -> int:
        return self._n

    def request(self, graph: Graph, purpose: str) -> PlanRequest:
        pctx = self.pctx
        return PlanRequest(self.n, pctx.parallel_mode, pctx.search_mode, purpose, pctx.dataset_strategy,
                           strategy_file.for_plan(pctx) or self._signature_plan(purpose),
                           search_settings(pctx.parallel_mode, pctx.search_mode, _context.current().max_device_memory,
                                           self.devices[0].platform, _context.current_cost_model().objective_weights,
                                           _context.current_cost_model().rp_matmul_mem_coef),
                           graph_optimizer_slots(graph, self.optimizer), mesh=self.info,
                           algo=_context.current_algo(), propagation_order=pctx.propagation_order)

    def _signature_plan(self, purpose: str) -> strategy_file.StrategyFile | None:
        """A forward of a network whose ``set_inputs`` signature has dynamic dimensions runs the signature's plan
        on every concrete shape (``compile.plans.dynamic``); a train step plans its concrete shapes (the signature
        is still checked on each call)."""
        signature = self.network.get_inputs() if isinstance(self.network, Cell) else None
        if purpose != "forward" or signature is None or not has_dynamic(signature):
            return None
        planned = plan_cell(self.network, signature, devices=self.n, record=False)
        return signature_record(planned, signature_label(self.network, signature), self.n)

    def layout(self, graph: Graph | None) -> Layout:
        if graph is None or self.pynative:
            return self._one_device
        if self.info is None:
            self.info, self.mesh = graph.plan.mesh, make_mesh(self.devices, [graph.plan.mesh.sizes])
        return GraphLayout(self.mesh, graph)

    def _mesh_for_pins(self):
        return self.mesh


def semi_auto_plan(network, devices, pctx, n_virtual=None, optimizer=None) -> SemiAutoPlan:
    return SemiAutoPlan(network, devices, pctx, n_virtual, optimizer)
