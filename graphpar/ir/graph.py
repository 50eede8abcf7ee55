"""The graph IR: op nodes over values, backed by the ClosedJaxpr they were traced from.

A :class:`Graph` is what the parallel passes read and annotate. Each :class:`Node` is one graphpar op call (a whole
``MatMul``, however many equations it took) or one raw ``jnp``/``lax`` equation written directly in ``construct``.
It knows its MindSpore-style identity (kind ``MatMul``, instance name ``matmul``, Cell scope), the user's strategy
hint, and its input and output :class:`Value` s with global shapes. Passes fill in ``strategy`` (labelled splits
and the layouts they imply) and ``provenance``; the lowering evaluates ``eqn`` per node.

Passes never mutate a graph they are given: :meth:`Graph.with_annotations` returns a new graph sharing the
immutable structure. What planning decides about the whole graph (its mesh, the layouts of its inputs, the search's
record, the passes' timings) is one frozen :class:`GraphPlan` on ``graph.plan``: a pass replaces it
(``graph.with_plan(value_specs=...)``), nobody edits it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from graphpar.common.dtype import ms_name
from graphpar.ir.notebook import html_of


Spec = tuple[tuple[str, ...], ...]  # a canonical layout: per tensor dimension, the mesh axes splitting it


@dataclass(frozen=True)
class MeshInfo:
    """The base mesh: axis names and sizes, left (major) to right. (Here, not in the planner, because a planned
    graph records the mesh it was planned on: ``GraphPlan.mesh``.)"""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def n_devices(self) -> int:
        return math.prod(self.sizes)

    @cached_property
    def _index(self) -> dict[str, int]:
        return dict(zip(self.names, self.sizes))

    def size(self, axes: Sequence[str]) -> int:
        """Devices along ``axes`` (a plain product: the planner calls this in its inner loops)."""
        index, out = self._index, 1
        for a in axes:
            out *= index[a]
        return out


@dataclass(frozen=True)
class GraphPlan:
    """What planning decided about a graph as a whole, one typed field per decision (node strategies live on the
    nodes). Frozen, so a pass that adds a decision returns a new graph (``Graph.with_plan``) and the invariant
    checks can tell its input was left alone; every layout is keyed by value id, every read hint by node id.

    The planner's passes fill it (``graphpar.planner.planning``): ``read_hints`` the hints, read once,
    ``choose_mesh`` the mesh, ``dataset_layouts`` the inputs' dataset layouts, ``place_parameters`` the storage
    layouts and conflicts, ``report_redistributions`` the priced edges, ``search`` its record; the pipeline adds the
    request's purpose, note and optimizer slots and the passes' timings."""

    mesh: MeshInfo | None = None  # the mesh the graph is planned on
    hints: Mapping[int, Any] = field(default_factory=dict)  # node id -> planner.passes.hints.ReadHint (read_hints)
    purpose: str = ""  # "train" (a step) or "forward"
    parallel_mode: str = ""  # the ParallelMode value the graph was planned under ("" before planning)
    note: str = ""  # one line the begin dump shows (what runs this graph: data parallel replicas, a stage)
    input_specs: Mapping[int, Spec] = field(default_factory=dict)  # graph-input value id -> dataset layout
    value_specs: Mapping[int, Spec] = field(default_factory=dict)  # param/state/input value id -> storage layout
    param_conflicts: tuple[Mapping[str, Any], ...] = ()  # per Parameter whose consumers want other layouts
    redistributions: tuple[Mapping[str, Any], ...] = ()  # one record per priced edge (report_redistributions)
    search: Any = None  # graphpar.planner.search.record.SearchRecord when AUTO_PARALLEL's search planned the graph
    pass_seconds: Mapping[str, float] = field(default_factory=dict)  # pass name -> seconds, in pass order
    optimizer_slots: Mapping[str, float] | None = None  # per trained parameter, optimizer state per element


@dataclass(eq=False)
class Value:
    """A tensor flowing in the graph. ``kind`` is ``param`` / ``state`` / ``input`` / ``const`` / ``op``."""

    id: int
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: str
    name: str = ""
    producer: int | None = None  # node id
    consumers: list[tuple[int, int]] = field(default_factory=list)  # (node id, input index)
    const: Any = None

    @property
    def itemsize(self) -> int:
        try:
            return np.dtype(self.dtype).itemsize
        except TypeError:
            return 8

    @property
    def is_array(self) -> bool:
        """A plain numeric array (not a PRNG key or token): what sharding constraints apply to."""
        return isinstance(self.dtype, np.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.itemsize

    def type_text(self, shape: tuple[int, ...] | None = None) -> str:
        shape = self.shape if shape is None else shape
        return f"<Tensor[{ms_name(self.dtype)}], {tuple(shape)}>"


@dataclass(frozen=True)
class Provenance:
    """Why a node has its strategy: ``user`` hint, ``propagated`` from a node over an edge of some cost,
    ``default`` (data parallel / stand-alone), or ``fallback`` (no sharding rule: replicated)."""

    kind: str
    source: int | None = None  # node id the strategy came from (propagated)
    cost: float = 0.0  # redistribution wire bytes per device on the edges priced when the choice was made
    detail: str = ""
    breakdown: dict[str, float] | None = field(default=None, compare=False)  # cost model record of the choice

    def text(self, graph: "Graph | None" = None) -> str:
        if self.kind == "propagated" and graph is not None and self.source is not None:
            src = graph.nodes[self.source]
            head = f"propagated from {src.instance_name} (node {src.id}) at cost {self.cost:g} B"
        elif self.kind == "propagated":
            head = f"propagated at cost {self.cost:g} B"
        else:
            head = self.kind + (f": {self.detail}" if self.detail else "")
        if not self.breakdown:
            return head
        return head + " [cost " + " ".join(f"{k}={v:g}" for k, v in self.breakdown.items()) + "]"


@dataclass(eq=False)
class Node:
    """One op node. ``is_op`` distinguishes graphpar op calls from raw equations."""

    id: int
    kind: str
    instance_name: str
    scope: str
    attrs: dict[str, Any]
    hint: tuple | None
    out_hint: tuple | None
    inputs: list[int]  # value ids
    outputs: list[int]  # value ids
    eqn: Any  # the jaxpr equation (a ``jit`` equation for a staged graphpar op; None for one traced inline)
    is_op: bool
    input_names: tuple[str, ...] = ()
    static_args: dict[int, Any] = field(default_factory=dict)  # non-tensor call arguments (axis, perm, ...)
    strategy: Any = None  # parallel.strategy.NodeStrategy, set by passes
    provenance: Provenance | None = None
    body: Any = None  # ir.trace.OpBody: the equations of an op traced inline (``eqn`` is then None)
    # the backward recomputation (a ``jax.checkpoint`` under a gradient taken in construct) this node belongs to:
    # the lowering keeps each such run one checkpoint, so XLA cannot merge it with the forward it recomputes
    remat: int | None = None
    debug_name: str = ""  # the construct variable its result is assigned to, MindSpore's node name (ir.debug_names)

    @property
    def label(self) -> str:
        """The named scope this node runs under in the lowered program (how HLO finds its op)."""
        return f"{self.scope}/{self.instance_name}#{self.id}" if self.scope else f"{self.instance_name}#{self.id}"


@dataclass
class Graph:
    """Values and nodes (in topological order) of one traced function."""

    closed_jaxpr: Any
    values: dict[int, Value]
    nodes: dict[int, Node]
    order: list[int]  # node ids, topological
    inputs: list[int]  # value ids, in the traced function's flattened argument order
    outputs: list[int]  # value ids, in the traced function's flattened result order
    name: str = "graph"
    plan: GraphPlan = field(default_factory=GraphPlan)
    # Cell scope -> its recompute setting, as the recorder saw them while tracing (compile.lowering.recompute)
    recompute_scopes: Mapping[str, Any] = field(default_factory=dict)
    # checks the ops deferred to the runtime, made on the batch outside the program (ir.recorder, defer_input_checks)
    input_checks: tuple[Any, ...] = ()
    # a gradient was taken inside construct (GradOperation): the graph holds that backward, as a MindSpore training
    # graph does (graphpar.dump.parallel_graph inserts the training graph's mirror and virtual-div ops)
    inner_gradient: bool = False

    def node_list(self) -> list[Node]:
        return [self.nodes[i] for i in self.order]

    def producer(self, value_id: int) -> Node | None:
        p = self.values[value_id].producer
        return None if p is None else self.nodes[p]

    def consumers(self, value_id: int) -> list[tuple[Node, int]]:
        return [(self.nodes[n], k) for n, k in self.values[value_id].consumers]

    def neighbors(self, node: Node) -> list[Node]:
        seen: dict[int, Node] = {}
        for v in node.inputs:
            p = self.producer(v)
            if p is not None:
                seen[p.id] = p
        for v in node.outputs:
            for c, _ in self.consumers(v):
                seen[c.id] = c
        seen.pop(node.id, None)
        return list(seen.values())

    def find(self, instance_name: str) -> list[Node]:
        return [n for n in self.node_list() if n.instance_name == instance_name]

    def with_annotations(self, updates: dict[int, dict[str, Any]]) -> "Graph":
        """A new graph whose nodes ``updates[node_id]`` fields are replaced (structure shared)."""
        nodes = dict(self.nodes)
        for nid, fields_ in updates.items():
            nodes[nid] = dataclasses.replace(nodes[nid], **fields_)
        return dataclasses.replace(self, nodes=nodes)

    def with_plan(self, **decisions: Any) -> "Graph":
        """A new graph whose :class:`GraphPlan` has these fields replaced (structure shared)."""
        return dataclasses.replace(self, plan=dataclasses.replace(self.plan, **decisions))

    def _repr_html_(self) -> str | None:
        """Notebooks: a planned graph's per-op table, device grids and picture (graphpar.viz, through the registry of
        graphpar.ir.notebook); None for a graph not planned yet."""
        return html_of(self)

    def as_text(self) -> str:
        """A readable listing: one line per node with kind, instance, shapes, strategy and scope."""
        lines = [f"graph {self.name}("]
        for vid in self.inputs:
            v = self.values[vid]
            lines.append(f"  %{v.kind}{vid} {v.name}: {v.type_text()}")
        lines.append(") {")
        for node in self.node_list():
            ins = ", ".join(f"%{v}" for v in node.inputs)
            outs = ", ".join(f"%{v}" for v in node.outputs)
            types_in = ", ".join(self.values[v].type_text() for v in node.inputs)
            types_out = ", ".join(self.values[v].type_text() for v in node.outputs)
            strat = f" {{in_strategy: {node.strategy.in_strategy_text()}}}" if node.strategy is not None else ""
            hint = f" hint={node.hint}" if node.hint is not None else ""
            lines.append(f"  {outs} = {node.kind}({ins}) {{instance name: {node.instance_name}}}{hint}{strat} : "
                         f"({types_in}) -> ({types_out})  # scope: ({node.scope})")
        lines.append("  return " + ", ".join(f"%{v}" for v in self.outputs))
        lines.append("}")
        return "\n".join(lines)
