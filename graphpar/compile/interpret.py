"""The lowering interpreter: re-evaluate a planned graph inside ``jax.jit``, pinning every layout.

For each node in order: constrain each array input to the layout the node's strategy needs
(``with_sharding_constraint``), evaluate the node's equation under the named scope ``{scope}/{instance}#{id}``, and
constrain each output to the layout the strategy gives it. XLA's SPMD partitioner then inserts exactly the
collectives those layouts imply (an all-reduce for a contracted split, an all-gather or all-to-all for a
redistribution), and the named scope travels into the HLO metadata, which is how the execute dump attributes every
collective to its op. Gradients follow by autodiff of this function (a sharding constraint's transpose constrains
the cotangent alike).

Runs of nodes marked for recomputation (``Cell.recompute()``, ``Primitive.recompute()``) are evaluated inside
``jax.checkpoint`` (``compile.recompute``). Op nodes bind their own ``jit`` equation; ``custom_jvp``/``custom_vjp``
equations are re-bound with their bind params (keeping custom derivatives).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh, NamedSharding

from graphpar.compile import recompute
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


def evaluate(graph: Graph, args: Sequence[Any], mesh: Mesh | None = None,
             vmapped_axes: frozenset[str] = frozenset()) -> list[Any]:
    """The graph's outputs for flat ``args`` (in ``graph.inputs`` order); with ``mesh``, layouts are pinned.

    ``vmapped_axes``: mesh axes a surrounding ``jax.vmap(spmd_axis_name=...)`` already splits over (gradient
    accumulation's per-replica step, ``compile.replica_split``); they are left out of every pinned layout."""
    env: dict[int, Any] = {}
    for vid, value in graph.values.items():
        if value.kind == "const":
            env[vid] = value.const
    for vid, x in zip(graph.inputs, args):
        env[vid] = x

    def pin(x: Any, spec: Any, vid: int, where: str) -> Any:
        if mesh is None or spec is None or not graph.values[vid].is_array:
            return x
        if vmapped_axes:
            spec = tuple(tuple(a for a in axes if a not in vmapped_axes) for axes in spec)
        with jax.named_scope(where):  # "in0"/"out0": the execute dump tells redistributions of inputs apart
            return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, to_partition_spec(spec)))

    # the layout each value is known to have: storage layouts of inputs, pinned layouts of node outputs
    layout: dict[int, Any] = dict(graph.meta.get("value_specs", {})) if mesh is not None else {}
    # level3 of the parallel optimizer: name the values computed from the batch (compile.recompute)
    from_batch = ({v for v in graph.inputs if graph.values[v].kind == "input"} if recompute.names_activations()
                  else None)

    def run(node: Node, env: dict[int, Any], name_comm: bool = False) -> None:
        strategy = node.strategy if mesh is not None else None
        with jax.named_scope(node.label):
            xs = [env[v] for v in node.inputs]
            if strategy is not None:
                # pin an input only where its layout changes (a redistribution); elsewhere it is already pinned
                xs = [x if layout.get(v) == strategy.input_spec(i) else
                      _named(pin(x, strategy.input_spec(i), v, f"in{i}"), name_comm)
                      for i, (x, v) in enumerate(zip(xs, node.inputs))]
            outs = _apply(node, xs)
            if strategy is not None:
                outs = [pin(o, strategy.output_spec(j), v, f"out{j}")
                        for j, (o, v) in enumerate(zip(outs, node.outputs))]
                layout.update((v, strategy.output_spec(j)) for j, v in enumerate(node.outputs))
            if name_comm and recompute.is_communication(node):
                outs = [_named(o, True) for o in outs]
            if from_batch is not None and any(v in from_batch for v in node.inputs):
                from_batch.update(node.outputs)
                outs = [checkpoint_name(o, recompute.ACTIVATION) if graph.values[v].is_array else o
                        for o, v in zip(outs, node.outputs)]
        for vid, out in zip(node.outputs, outs):
            env[vid] = out

    for config, nodes in recompute.segments(graph):
        if config is None:
            for node in nodes:
                run(node, env)
        else:
            _run_checkpointed(graph, nodes, config, env, run)
    return [env[v] for v in graph.outputs]


def _named(x: Any, name_comm: bool) -> Any:
    return checkpoint_name(x, recompute.COMM) if name_comm else x


def _run_checkpointed(graph: Graph, nodes: Sequence[Node], config: Any, env: dict[int, Any], run: Any) -> None:
    """Evaluate a run of recomputed nodes inside ``jax.checkpoint``: its inputs are the values it reads from
    outside (constants are closed over), its outputs those read after it."""
    inside = {v for node in nodes for v in node.outputs}
    ext = list(dict.fromkeys(v for node in nodes for v in node.inputs
                             if v not in inside and graph.values[v].kind != "const"))
    ids = {node.id for node in nodes}
    later = {v for node in graph.node_list() if node.id not in ids for v in node.inputs} | set(graph.outputs)
    needed = [v for node in nodes for v in node.outputs if v in later]
    consts = {v: env[v] for node in nodes for v in node.inputs if graph.values[v].kind == "const"}

    def segment(*args: Any) -> list[Any]:
        local = dict(consts)
        local.update(zip(ext, args))
        for node in nodes:
            run(node, local, name_comm=not config.mp_comm_recompute)
        return [local[v] for v in needed]

    outs = jax.checkpoint(segment, policy=config.policy())(*[env[v] for v in ext])
    env.update(zip(needed, outs))
