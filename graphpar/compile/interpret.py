"""The lowering interpreter: re-evaluate a planned graph inside ``jax.jit``, pinning every layout.

For each node in order: constrain each array input to the layout the node's strategy needs
(``with_sharding_constraint``), evaluate the node's equation under the named scope ``{scope}/{instance}#{id}``, and
constrain each output to the layout the strategy gives it. XLA's SPMD partitioner then inserts exactly the
collectives those layouts imply (an all-reduce for a contracted split, an all-gather or all-to-all for a
redistribution), and the named scope travels into the HLO metadata, which is how the execute dump attributes every
collective to its op. Gradients follow by autodiff of this function (a sharding constraint's transpose constrains
the cotangent alike).

Op nodes bind their own ``jit`` equation; ``custom_jvp``/``custom_vjp`` equations are re-bound with their bind params
(keeping custom derivatives).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding

from graphpar.ir.graph import Graph, Node
from graphpar.parallel.strategy import to_partition_spec


def _apply(node: Node, args: Sequence[Any]) -> list[Any]:
    eqn = node.eqn
    if node.is_op:
        # the op's own jit equation, bound whole: JAX differentiates and lowers it as one call (cheaper than
        # re-evaluating its equations one by one), and its name stays inside the node's named scope
        return list(eqn.primitive.bind(*args, **eqn.params))
    params = eqn.primitive.get_bind_params(eqn.params)
    with eqn.ctx.manager:
        out = eqn.primitive.bind(*args, **params)
    return list(out) if eqn.primitive.multiple_results else [out]


def evaluate(graph: Graph, args: Sequence[Any], mesh: Mesh | None = None) -> list[Any]:
    """The graph's outputs for flat ``args`` (in ``graph.inputs`` order); with ``mesh``, layouts are pinned."""
    env: dict[int, Any] = {}
    for vid, value in graph.values.items():
        if value.kind == "const":
            env[vid] = value.const
    for vid, x in zip(graph.inputs, args):
        env[vid] = x

    def pin(x: Any, spec: Any, vid: int, where: str) -> Any:
        if mesh is None or spec is None or not graph.values[vid].is_array:
            return x
        with jax.named_scope(where):  # "in0"/"out0": the execute dump tells redistributions of inputs apart
            return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, to_partition_spec(spec)))

    # the layout each value is known to have: storage layouts of inputs, pinned layouts of node outputs
    layout: dict[int, Any] = dict(graph.meta.get("value_specs", {})) if mesh is not None else {}
    for node in graph.node_list():
        strategy = node.strategy if mesh is not None else None
        with jax.named_scope(node.label):
            xs = [env[v] for v in node.inputs]
            if strategy is not None:
                # pin an input only where its layout changes (a redistribution); elsewhere it is already pinned
                xs = [x if layout.get(v) == strategy.input_spec(i) else pin(x, strategy.input_spec(i), v, f"in{i}")
                      for i, (x, v) in enumerate(zip(xs, node.inputs))]
            outs = _apply(node, xs)
            if strategy is not None:
                outs = [pin(o, strategy.output_spec(j), v, f"out{j}")
                        for j, (o, v) in enumerate(zip(outs, node.outputs))]
                layout.update((v, strategy.output_spec(j)) for j, v in enumerate(node.outputs))
        for vid, out in zip(node.outputs, outs):
            env[vid] = out
    return [env[v] for v in graph.outputs]
