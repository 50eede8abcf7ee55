"""Ops whose layout follows their input instead of a strategy (MindSpore's ``ReshapeInfo``).

MindSpore never gives ``Reshape`` a strategy of its own: ``step_parallel`` takes the layout of the tensor that
reaches it (``FindPrevLayout``) and carries it through the reshape; a strategy set on it "goes for nothing" (it is
ignored, with a warning), and sharding propagation skips it when pricing edges. graphpar does the same for
``Reshape`` and for the raw ``jnp.reshape`` / ``squeeze`` / ``expand_dims`` primitives (pure views, which no
MindSpore op can hint). The carry rule is :func:`graphpar.planner.dims.carry_reshape`.

``Depend(value, expr)`` follows too, and is no op at all to MindSpore's planner (it builds no ``OperatorInfo`` for
it: ``ConstructCNodeCostGraphEdges`` walks from a Depend to its first input, and ``_get_shard_strategy`` lists no
Depend): its output is ``value`` in the layout ``value`` arrives in, and ``expr`` only orders the program. So
``expr`` is no edge of propagation (:func:`linked`) and is taken in whatever layout it arrives in, never
redistributed (``default_strategies``).

Two ``Reshape`` ops back to back (directly or through Depends) are no edge of propagation either: MindSpore's
``Edge::GetReshapeSWCIndexByPrevOpStrategy`` / ``GetNextOpStrategyByReshapeSWCIndex`` refuse an edge whose two ends
are Reshapes ("please set the strategy for at least one"), so a layout reaching one Reshape stops there
(:func:`linked`); the second Reshape takes the layout that reaches it at the end (``default_strategies``).
"""

from __future__ import annotations

from graphpar._logging import notice_once
from graphpar.ir.graph import Graph, Node
from graphpar.planner.cost import replicated_spec
from graphpar.planner.dims import DimSpec, carry_reshape
from graphpar.planner.strategy import MeshInfo, NodeStrategy, Spec

FOLLOWS_INPUT = frozenset({"Reshape", "reshape", "squeeze", "expand_dims", "Depend"})
PASS_THROUGH = frozenset({"Depend"})  # no op to MindSpore's planner: output = input 0, the rest orders only


def follows_input(node: Node) -> bool:
    return node.kind in FOLLOWS_INPUT


def is_pass_through(node: Node) -> bool:
    """``Depend``: no op of its own in MindSpore's plan (no strategy listed, its extra inputs are no edge)."""
    return node.kind in PASS_THROUGH


def data_inputs(node: Node) -> tuple[int, ...]:
    """The inputs whose values ``node`` computes with: all, except a pass-through op's ordering-only ones."""
    return (0,) if is_pass_through(node) else tuple(range(len(node.inputs)))


def ignore_hint(node: Node, hint_text: str) -> None:
    """The one-time warning for a ``shard()`` (``hint_text``: MindSpore's printing of it) on an op whose layout
    follows its input."""
    notice_once(f"follow-hint:{node.instance_name}:{node.scope}",
                f"op '{node.instance_name}' (scope {node.scope or '(top level)'}): {node.kind} takes its layout from "
                f"its input, so shard({hint_text}) is ignored (as MindSpore ignores a strategy set on "
                f"Reshape)")


def _ends(graph: Graph, node: Node, upward: bool) -> list[Node]:
    """The ops at the far side of the Depends around ``node`` (itself when it is no Depend): upward, the producer
    of its data input; downward, the consumers of its output."""
    if not is_pass_through(node):
        return [node]
    if upward:
        producer = graph.producer(node.inputs[0])
        return [] if producer is None else _ends(graph, producer, True)
    found: list[Node] = []
    for vid in node.outputs[:1]:  # none where the trace hands on ``value`` itself
        for consumer, k in graph.consumers(vid):
            if k in data_inputs(consumer):
                found.extend(_ends(graph, consumer, False))
    return found


def linked(graph: Graph, current: Node, neighbour: Node) -> bool:
    """Whether propagation goes from the decided ``current`` to its neighbour ``neighbour`` (module docstring): not
    over a Depend's ordering-only input, and not between two ``Reshape`` ops (looking through Depends on both
    sides: ``Reshape -> Depend -> Reshape`` is one such edge to MindSpore)."""
    downstream = any(k in data_inputs(neighbour) for vid in current.outputs
                     for c, k in graph.consumers(vid) if c.id == neighbour.id)
    upstream = any(graph.values[current.inputs[k]].producer == neighbour.id for k in data_inputs(current))
    if not (downstream or upstream):
        return False
    near = _ends(graph, current, upward=downstream)
    far = _ends(graph, neighbour, upward=not downstream)
    return not (near and far and all(n.kind == "Reshape" for n in near + far))


def follow_strategy(node: Node, dims: DimSpec, graph: Graph, mesh: MeshInfo, src: Spec | None,
                    extra: dict[int, Spec] | None = None) -> NodeStrategy:
    """The strategy of a layout-following ``node`` whose first input arrives in layout ``src`` (``None``: unknown,
    taken as replicated). Extra inputs (a shape tensor) are replicated, unless ``extra`` gives the layout one
    arrives in (a Depend's ordering-only input: ``default_strategies``)."""
    ins = [graph.values[v] for v in node.inputs]
    outs = [graph.values[v] for v in node.outputs]
    x = ins[0]
    src = replicated_spec(len(x.shape)) if src is None or not x.is_array else src
    extra = extra or {}
    if outs:
        kept, out = carry_reshape(tuple(x.shape), tuple(outs[0].shape), dict(zip(mesh.names, mesh.sizes)), src)
        out_specs = (out,) + tuple(replicated_spec(len(v.shape)) for v in outs[1:])
    else:  # a Depend whose trace hands on ``value`` itself: the node only orders, its input stays as it arrives
        kept, out_specs = src, ()
    in_specs = (kept,) + tuple(extra.get(k, replicated_spec(len(v.shape))) for k, v in enumerate(ins[1:], 1))
    return NodeStrategy(dims, (), tuple(mesh.names), mesh, out_override=out_specs, in_override=in_specs)


def value_layout(graph: Graph, vid: int, strategies: dict[int, NodeStrategy],
                 input_specs: dict[int, Spec]) -> Spec | None:
    """The layout value ``vid`` is produced in under the decided ``strategies`` (or arrives in, for a graph
    input), or ``None`` while its producer is undecided."""
    value = graph.values[vid]
    if value.producer is not None:
        s = strategies.get(value.producer)
        if s is None:
            return None
        return s.output_spec(graph.nodes[value.producer].outputs.index(vid))
    return input_specs.get(vid)


def input_for_output(node: Node, graph: Graph, mesh: MeshInfo, want: Spec) -> Spec:
    """The input layout of a layout-following ``node`` that yields (as much as carries of) output layout ``want``:
    how propagation crosses a Reshape from its consumer side (MindSpore's ``BFSPrevNodeIfCurrIsReshape``)."""
    x, y = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    return carry_reshape(tuple(y.shape), tuple(x.shape), dict(zip(mesh.names, mesh.sizes)), want)[1]
