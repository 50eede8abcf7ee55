"""The first two stages of compiling a network, as values: ``Traced → Planned``.

A plan makes them (``ExecutionPlan.trace``, then its pass pipeline); ``compile.staging.stages`` holds the two
that follow (``Lowered → Compiled``), which the orchestrator makes from a ``Planned``. Each stage has ``as_text()``
(as ``jax.stages`` do): the traced jaxpr, the planned strategies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphpar.compile.plans.layout import Layout
from graphpar.ir.graph import Graph


@dataclass(frozen=True)
class Traced:
    """The network's step (``purpose`` "train") or forward ("forward") traced into the graph IR, global shapes."""

    graph: Graph
    purpose: str
    out_treedef: Any = None  # forward: the structure of the network's outputs
    seconds: float = 0.0

    def as_text(self) -> str:
        return str(self.graph.closed_jaxpr)


@dataclass(frozen=True)
class Planned:
    """A traced graph after the plan's pass pipeline: every node has a strategy, every input a layout."""

    graph: Graph | None  # None in PYNATIVE_MODE (the network runs as written)
    layout: Layout
    purpose: str
    out_treedef: Any = None
    seconds: float = 0.0  # tracing + planning
    traced: Traced | None = None
    # the process's CPU time of "tracing" and "planning", as built (steadier than wall on a loaded machine)
    cpu_seconds: dict[str, float] = field(default_factory=dict, compare=False)

    def as_text(self) -> str:
        if self.graph is None:
            return "# PYNATIVE_MODE: no planned graph; the network runs eagerly as written"
        lines = [f"# {self.graph.name} ({self.purpose})"]
        for node in self.graph.node_list():
            strategy = node.strategy.in_strategy_text() if node.strategy is not None else "-"
            source = node.provenance.text(self.graph) if node.provenance is not None else ""
            lines.append(f"{node.label}  {node.kind}  {strategy}  {source}".rstrip())
        return "\n".join(lines)
