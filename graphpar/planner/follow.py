"""Ops whose layout follows their input instead of a strategy (MindSpore's ``ReshapeInfo``).

MindSpore never gives ``Reshape`` a strategy of its own: ``step_parallel`` takes the layout of the tensor that
reaches it (``FindPrevLayout``) and carries it through the reshape; a strategy set on it "goes for nothing" (it is
ignored, with a warning), and sharding propagation skips it when pricing edges. graphpar does the same for
``Reshape`` and for the raw ``jnp.reshape`` / ``squeeze`` / ``expand_dims`` primitives (pure views, which no
MindSpore op can hint). The carry rule is :func:`graphpar.planner.dims.carry_reshape`.
"""

from __future__ import annotations

from graphpar._logging import notice_once
from graphpar.ir.graph import Graph, Node
from graphpar.planner.cost import replicated_spec
from graphpar.planner.dims import DimSpec, carry_reshape
from graphpar.planner.strategy import MeshInfo, NodeStrategy, Spec

FOLLOWS_INPUT = frozenset({"Reshape", "reshape", "squeeze", "expand_dims"})


def follows_input(node: Node) -> bool:
    return node.kind in FOLLOWS_INPUT


def ignore_hint(node: Node, hint_text: str) -> None:
    """The one-time warning for a ``shard()`` (``hint_text``: MindSpore's printing of it) on an op whose layout
    follows its input."""
    notice_once(f"follow-hint:{node.instance_name}:{node.scope}",
                f"op '{node.instance_name}' (scope {node.scope or '(top level)'}): {node.kind} takes its layout from "
                f"its input, so shard({hint_text}) is ignored (as MindSpore ignores a strategy set on "
                f"Reshape)")


def follow_strategy(node: Node, dims: DimSpec, graph: Graph, mesh: MeshInfo, src: Spec | None) -> NodeStrategy:
    """The strategy of a layout-following ``node`` whose first input arrives in layout ``src`` (``None``: unknown,
    taken as replicated). Extra inputs (a shape tensor) are replicated."""
    ins = [graph.values[v] for v in node.inputs]
    outs = [graph.values[v] for v in node.outputs]
    x, y = ins[0], outs[0]
    src = replicated_spec(len(x.shape)) if src is None or not x.is_array else src
    kept, out = carry_reshape(tuple(x.shape), tuple(y.shape), dict(zip(mesh.names, mesh.sizes)), src)
    in_specs = (kept,) + tuple(replicated_spec(len(v.shape)) for v in ins[1:])
    out_specs = (out,) + tuple(replicated_spec(len(v.shape)) for v in outs[1:])
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
