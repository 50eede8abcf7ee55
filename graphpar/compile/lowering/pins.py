"""Preparing a planned graph for the lowering interpreter: each node's :class:`Step`, pins worked out once.

Everything about a node that does not depend on the traced values — which inputs need a redistribution pin, each
pin's ``NamedSharding``, which outputs need none (:func:`implied_outputs`), its body and body key — is worked out
by :func:`prepare`, once per lowering plan (``compile.lowering.plan``), so the interpreter
(``compile.lowering.interpret``) only binds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jax.sharding import Mesh, NamedSharding

from graphpar.compile.lowering import recompute
from graphpar.compile.lowering.bodies import BodyKeys, node_body
from graphpar.compile.lowering.channels_last import GraphLayout
from graphpar.ir.graph import Graph, Node
from graphpar.planner.strategy import to_partition_spec

Pin = tuple[int, NamedSharding, str]  # (position, layout, named scope "in0"/"out0")


@dataclass(frozen=True)
class Step:
    """One node, ready to evaluate: its body, the pins around it, whether its outputs are communication.
    ``share``: equal for two steps of one :func:`prepare` that compute the same function of their inputs, pins
    included (a small int standing for the structural key, hashed once; None: never shared; see
    ``plan.shared_calls``)."""

    node: Node
    body: Callable[[Sequence[Any]], list[Any]]
    in_pins: tuple[Pin, ...]
    out_pins: tuple[Pin, ...]
    communication: bool
    share: int | None = None
    all_out_pins: tuple[Pin, ...] = ()  # out_pins and the pins of implied outputs (inside a group call)

    @property
    def inputs(self) -> list[int]:
        return self.node.inputs

    @property
    def outputs(self) -> list[int]:
        return self.node.outputs


def prepare(graph: Graph, mesh: Mesh | None, vmapped_axes: frozenset[str] = frozenset(),
            layouts: GraphLayout | None = None) -> dict[int, Step]:
    """Each node's :class:`Step` (by node id). With ``mesh``, an input is pinned only where its layout changes (a
    redistribution; elsewhere the producer's output pin or the storage layout already holds) and every output is
    pinned to its planned layout, less the ``vmapped_axes`` (see ``plan.plan_lowering``). With ``layouts`` (the
    channels-last pass, ``compile.lowering.channels_last``), a node computing on permuted arrays gets its relaid
    body, and a pin of a value held permuted splits the dimensions the planned layout names, in physical order."""
    shardings: dict[Any, NamedSharding] = {}

    def sharding(spec: Any, value: int) -> NamedSharding:
        perm = layouts.perm(value) if layouts is not None else None
        if perm is not None:
            spec = tuple(spec[d] for d in perm)
        found = shardings.get(spec)
        if found is None:
            kept = tuple(tuple(a for a in axes if a not in vmapped_axes) for axes in spec) if vmapped_axes else spec
            found = shardings[spec] = NamedSharding(mesh, to_partition_spec(kept))
        return found

    layout: dict[int, Any] = dict(graph.plan.value_specs) if mesh is not None else {}
    implied = implied_outputs(graph) if mesh is not None else frozenset()
    steps: dict[int, Step] = {}
    keys = BodyKeys()
    shares: dict[tuple, int] = {}  # structural key (body key and pins) -> its small int
    for node in graph.node_list():
        strategy = node.strategy if mesh is not None else None
        in_pins: list[Pin] = []
        out_pins: list[Pin] = []
        all_out: list[Pin] = []
        if strategy is not None:
            for i, v in enumerate(node.inputs):
                spec = strategy.input_spec(i)
                if spec is not None and layout.get(v) != spec and graph.values[v].is_array:
                    in_pins.append((i, sharding(spec, v), f"in{i}"))
            for j, v in enumerate(node.outputs):
                spec = strategy.output_spec(j)
                layout[v] = spec
                if spec is not None and graph.values[v].is_array:
                    all_out.append((j, sharding(spec, v), f"out{j}"))
                    if v not in implied:
                        out_pins.append(all_out[-1])
        body_key = keys.node(graph, node)
        relaid = layouts.nodes.get(node.id) if layouts is not None else None
        if relaid is not None and body_key is not None:
            body_key = (body_key, relaid.signature)
        share = None if body_key is None else shares.setdefault(
            (body_key, tuple(in_pins), tuple(out_pins), tuple(all_out)), len(shares))
        steps[node.id] = Step(node, node_body(node) if relaid is None else relaid.body, tuple(in_pins),
                              tuple(out_pins), recompute.is_communication(node), share, tuple(all_out))
    return steps


def _follows_input(graph: Graph, node: Node) -> bool:
    """An elementwise node whose one output has the labels and shape of one of its inputs, with no reduction, no
    communication and no layout override: its output layout is its inputs' layout, which is what XLA's sharding
    propagation gives it from its (pinned) operands."""
    s = node.strategy
    if (s is None or s.in_override is not None or s.out_override is not None or len(node.outputs) != 1
            or s.dims.contracted or recompute.is_communication(node)):
        return False
    out, shape = s.dims.outputs[0], graph.values[node.outputs[0]].shape
    return any(labels == out and graph.values[v].shape == shape for labels, v in zip(s.dims.inputs, node.inputs))


def implied_outputs(graph: Graph) -> frozenset[int]:
    """Outputs whose pin is implied by the pins around them, so they are left unpinned.

    An output of an elementwise node (:func:`_follows_input`) all of whose consumers are elementwise nodes of the
    same recompute run that take it, and give their output, in its own layout and shape: its operands are pinned
    (or storage layouts) and every path from it ends at a pin of the same layout through elementwise ops only, so
    XLA's propagation can give it no other layout, forward or backward (a chain of elementwise ops keeps its
    last pin). Each pin is an equation JAX linearizes, transposes and lowers: a ReLU after a bias add after a
    matmul needs one, not three."""
    run = {node.id: k for k, (_, nodes) in enumerate(recompute.segments(graph)) for node in nodes}
    follows = {node.id: _follows_input(graph, node) for node in graph.node_list()}
    outputs = set(graph.outputs)
    implied: set[int] = set()
    for node in graph.node_list():
        if not follows[node.id]:
            continue
        v = node.outputs[0]
        value, spec = graph.values[v], node.strategy.output_spec(0)
        if v in outputs or not value.consumers or any(n not in graph.nodes for n, _ in value.consumers):
            continue  # a result, unused, or read by another graph (a pipeline stage's sent value): pinned
        consumers = graph.consumers(v)
        if all(follows[c.id] and run[c.id] == run[node.id] and c.strategy.input_spec(k) == spec
               and c.strategy.output_spec(0) == spec and graph.values[c.outputs[0]].shape == value.shape
               for c, k in consumers):
            implied.add(v)
    return frozenset(implied)
