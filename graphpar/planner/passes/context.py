"""What every pass may read besides the graph: the mesh, the mode, the dataset layouts, and rule lookup."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphpar.ir.graph import Graph, Node
from graphpar.planner.dims import DimSpec, shapes_of
from graphpar.planner.rules import rule_for
from graphpar.planner.strategy import MeshInfo, NodeStrategy, Spec, enumerate_strategies


@dataclass
class PlanContext:
    mesh: MeshInfo
    mode: str  # ParallelMode value
    search_mode: str = "sharding_propagation"
    input_specs: dict[int, Spec] = field(default_factory=dict)  # graph-input value id -> dataset layout
    strategy_file: Any = None  # parallel.strategy_file.StrategyFile to force (strategy_ckpt_config load_file)
    search: Any = None  # parallel.search.settings.SearchSettings (AUTO_PARALLEL searches: memory budget, hardware)
    # per trained parameter name, the optimizer's state elements per element (parallel.memory_model; None: unknown)
    optimizer_slots: dict[str, float] | None = None
    _dims: dict[int, DimSpec | None] = field(default_factory=dict)
    _candidates: dict[tuple, tuple[NodeStrategy, ...]] = field(default_factory=dict)

    def dims(self, node: Node, graph: Graph) -> DimSpec | None:
        """The node's labelled dimensions (cached), or None when no rule covers its kind."""
        if node.id not in self._dims:
            rule = rule_for(node.kind)
            spec = None
            if rule is not None:
                spec = rule(node, graph)
                if spec is not None:
                    ins, outs = shapes_of(node, graph)
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
        key = (dims, tuple(ins), tuple(outs))
        found = self._candidates.get(key)
        if found is None:
            found = self._candidates[key] = tuple(enumerate_strategies(dims, ins, outs, self.mesh))
        return found
