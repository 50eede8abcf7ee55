"""What planning reads: the request (:class:`PlanRequest`), and what every pass reads besides the graph
(:class:`PlanContext`: the request, the mesh and dataset layouts decided so far, and rule lookup)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphpar._context import AlgoParameters
from graphpar.ir.graph import Graph, GraphPlan, Node
from graphpar.planner import algo_filters
from graphpar.planner.dims import DimSpec, shapes_of
from graphpar.planner.follow import is_pass_through
from graphpar.planner.rules import rule_for
from graphpar.planner.strategy import MeshInfo, NodeStrategy, Spec, enumerate_strategies


@dataclass(frozen=True)
class PlanRequest:
    """Everything planning reads besides the traced graph, read once by whoever asks for a plan (an execution
    plan, the pipeline program, a dry run): ``planner.planning.plan_graph(graph, request)`` needs nothing else.

    ``mesh``: the mesh to plan on. The mode's ``choose_mesh`` pass (SEMI_AUTO / AUTO / HYBRID) chooses one from
    the hints and refuses one other than a given mesh (a program keeps one mesh); the other modes plan on it as
    given. ``dataset_strategy`` is read by the ``dataset_layouts`` pass of the same modes. ``replicated``: the graph
    runs whole on every device (replicas, if any, are outside it), as the strategy file records it."""

    devices: int  # the devices planned for (real or virtual)
    parallel_mode: str  # ParallelMode value
    search_mode: str = "sharding_propagation"
    purpose: str = "train"  # "train" or "forward"
    dataset_strategy: Any = "data_parallel"  # set_auto_parallel_context(dataset_strategy=...)
    strategy_file: Any = None  # planner.strategy_file.StrategyFile to force (strategy_ckpt_config load_file)
    search: Any = None  # planner.search.settings.SearchSettings (AUTO_PARALLEL searches: memory budget, hardware)
    # per trained parameter name, the optimizer's state elements per element (planner.memory_model; None: unknown)
    optimizer_slots: Mapping[str, float] | None = None
    mesh: MeshInfo | None = None
    note: str = ""  # the begin dump's note line
    replicated: bool = False
    algo: AlgoParameters = AlgoParameters()  # set_algo_parameters (graphpar._context.algo)
    propagation_order: str = "hints_first"  # set_auto_parallel_context(propagation_order=...): planner.passes.propagate


def _with_residuals(node: Node, spec: DimSpec, outs: list) -> DimSpec:
    """A staged op differentiated inside ``construct`` (``GradOperation`` in a Cell) is traced as JAX's partial
    evaluation leaves it: the op's outputs, then the residuals its backward reads (a Gather's index arithmetic).
    Those extra outputs get no split (the rule describes the op's own outputs, which come first)."""
    extra = len(outs) - len(spec.outputs)
    if extra <= 0 or node.body is not None or not node.is_op:
        return spec
    padding = tuple(tuple(None for _ in shape) for shape in outs[len(spec.outputs):])
    return dataclasses.replace(spec, outputs=spec.outputs + padding, residuals=extra)


@dataclass
class PlanContext:
    """The request, the mesh and the dataset layouts of the graph being planned, and caches of rule lookups.
    ``plan_graph`` makes it from the graph's :class:`GraphPlan` (:meth:`on`), again after a pass decided the mesh
    or the dataset layouts."""

    mesh: MeshInfo | None
    request: PlanRequest
    input_specs: Mapping[int, Spec] = field(default_factory=dict)  # graph-input value id -> dataset layout
    _dims: dict[int, DimSpec | None] = field(default_factory=dict)
    _candidates: dict[tuple, tuple[NodeStrategy, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, request: PlanRequest, plan: GraphPlan) -> PlanContext:
        return cls(plan.mesh, request, plan.input_specs)

    def on(self, plan: GraphPlan) -> PlanContext:
        """This context for a graph whose plan now reads ``plan`` (rule lookups kept; candidates only on the same
        mesh)."""
        if plan.mesh == self.mesh and plan.input_specs is self.input_specs:
            return self
        candidates = self._candidates if plan.mesh == self.mesh else {}
        return dataclasses.replace(self, mesh=plan.mesh, input_specs=plan.input_specs, _candidates=candidates)

    @property
    def mode(self) -> str:
        return self.request.parallel_mode

    @property
    def search_mode(self) -> str:
        return self.request.search_mode

    @property
    def strategy_file(self) -> Any:
        return self.request.strategy_file

    @property
    def search(self) -> Any:
        return self.request.search

    @property
    def optimizer_slots(self) -> Mapping[str, float] | None:
        return self.request.optimizer_slots

    def dims(self, node: Node, graph: Graph) -> DimSpec | None:
        """The node's labelled dimensions (cached), or None when no rule covers its kind."""
        if node.id not in self._dims:
            rule = rule_for(node.kind)
            spec = None
            ins, outs = shapes_of(node, graph)
            # an op whose outputs a differentiated construct never reads (JAX's partial evaluation dropped them,
            # e.g. a Reshape feeding only an Add) has nothing to lay out
            if rule is not None and (outs or is_pass_through(node)):  # a Depend may hand on its input itself
                spec = rule(node, graph)
                if spec is not None:
                    spec = _with_residuals(node, spec, outs)
                    if len(spec.inputs) != len(ins) or len(spec.outputs) != len(outs) or any(
                            len(r) != len(s) for r, s in zip(spec.inputs + spec.outputs, ins + outs)):
                        spec = None  # the rule does not describe this call (an unusual signature): be safe
            self._dims[node.id] = spec
        return self._dims[node.id]

    def candidates(self, node: Node, graph: Graph) -> tuple[NodeStrategy, ...]:
        """Every strategy of ``node`` on the mesh (``enumerate_strategies``), or ``()`` when no rule covers it.

        Shared by the nodes of equal rule and shapes (the layers of a deep network): enumerating and building the
        candidates once per distinct op, not once per node, is most of what keeps propagation linear and cheap."""
        dims = self.dims(node, graph)
        if dims is None:
            return ()
        ins, outs = shapes_of(node, graph)
        algo = self.request.algo
        filtered = algo_filters.active(algo)
        key = (dims, tuple(ins), tuple(outs)) + ((node.kind,) if filtered else ())
        found = self._candidates.get(key)
        if found is None:
            found = tuple(enumerate_strategies(dims, ins, outs, self.mesh))
            if filtered:  # set_algo_parameters(fully_use_devices / tensor_slice_align_enable)
                found = algo_filters.allowed(node.kind, found, ins, self.mesh, algo)
            self._candidates[key] = found
        return found
