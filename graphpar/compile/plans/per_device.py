"""DATA_PARALLEL's per-device losses as each device's own program: ``jax.shard_map`` over the replicas (issue 28).

MindSpore's DATA_PARALLEL semantics (``compile.plans.execution.DataParallelPlan``): each device's loss on its own
slice of the batch, the gradient of the sum of the per-device losses. A ``jax.vmap`` over the device axis gives
them, but XLA then receives each weight gradient as a contraction over two dimensions, the replica dimension
(size 1 on each device) and the rows: on XLA:CPU a transpose of the per-device batch and a library fusion per
weight (21 fusions against the hand-written ``jax.jit`` step's 18 on the bench's 32-16-16 MLP, about 2-4 % of its
step). Here one replica's graph runs on each device as written, so each weight gradient is the local matmul's own
transpose and XLA compiles the hand-written step's instructions (``tests/train/test_data_parallel.py``).

The gradient reduction is explicit: each parameter enters the per-device graph through
:func:`_summed_over_replicas`, whose backward is a ``psum`` over the replica axis in the parameter's dtype, under a
named scope of the nodes that read the parameter, so the execute dump attributes the all-reduce to them as a
gradient reduction (``dump.writer``). ``shard_map``'s own reduction of a replicated input's cotangent (unnamed) is
avoided by handing the parameters in as one row per device (:func:`_rows`: no communication either way).

Where a parameter reaches the batch only through a conversion to another floating type (mixed precision's float16
weights), the ``vmap`` reduces that cotangent in the converted type, as the SEMI_AUTO plan's partitioned matmul
does, and an overflow there is what a dynamic loss scale reacts to: :func:`reduces_in_own_dtype` says when the
per-device program reduces exactly where the ``vmap`` did, and the plan keeps the ``vmap`` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from graphpar.communication.varying import varying_outputs
from graphpar.ir.graph import Graph

__all__ = ["per_device", "reduces_in_own_dtype"]


def reduces_in_own_dtype(graph: Graph, n_params: int) -> bool:
    """Whether every parameter-derived value that meets the batch in ``graph`` (a floating input, computed from
    trainable parameters only, of a node that also reads a batch-derived value) has the dtype of the parameters it
    comes from (the graph's first ``n_params`` inputs): then the ``vmap``'s gradient reductions, made where such a
    value meets the batch, run in the parameters' own dtypes, as :func:`per_device`'s do."""
    varying = {v for v in graph.inputs if graph.values[v].kind == "input"}
    sources = {v: {graph.values[v].dtype} for v in graph.inputs[:n_params]}  # value -> its parameters' dtypes
    for node in graph.node_list():
        if any(v in varying for v in node.inputs):
            for v in node.inputs:
                dtype = graph.values[v].dtype  # a PRNG key's is JAX's own, no numpy dtype
                if v in sources and v not in varying and jnp.issubdtype(dtype, jnp.floating) and \
                        dtype not in sources[v]:
                    return False
            varying.update(node.outputs)
        elif read := [sources[v] for v in node.inputs if v in sources]:
            sources.update((v, set().union(*read)) for v in node.outputs)
    return True


@partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _summed_over_replicas(x: Any, axis: str, scope: str) -> Any:
    """The identity; its cotangent summed over the replicas (``psum`` over ``axis``, named ``scope``)."""
    return x


def _summed_fwd(x, axis, scope):
    return x, None


def _summed_bwd(axis, scope, _, g):
    with jax.named_scope(scope):
        return (jax.lax.psum(g, axis),)


_summed_over_replicas.defvjp(_summed_fwd, _summed_bwd)


def _rows(mesh: Mesh, axis: str) -> Callable[[Any], Any]:
    """``tree`` -> each leaf as one row per device, ``(devices, ...)`` split over ``axis`` (each device's row is its
    own copy); backward, the rows' cotangents, the same on every device once reduced, read back as the replicated
    cotangent. Neither direction communicates."""
    split, whole = PartitionSpec(axis), PartitionSpec()

    def stack(tree):
        return jax.shard_map(lambda t: jax.tree.map(lambda v: v[None], t), mesh=mesh, in_specs=whole,
                             out_specs=split, check_vma=False)(tree)

    def first(tree):
        return jax.shard_map(lambda t: jax.tree.map(lambda v: v[0], t), mesh=mesh, in_specs=split,
                             out_specs=whole, check_vma=False)(tree)

    rows = jax.custom_vjp(stack)
    rows.defvjp(lambda tree: (stack(tree), None), lambda _, g: (first(g),))
    return rows


def _scope(graph: Graph, value: int) -> str | None:
    """The named scope of a parameter's gradient reduction: the labels of the nodes that read it (None: no node
    does, its gradient is zero on every device and needs no reduction)."""
    labels = [graph.nodes[nid].label for nid, _ in graph.values[value].consumers]
    return "/".join(labels + ["gradient_reduction"]) if labels else None


def per_device(per_replica: Callable[[Any, Any, Sequence[Any]], tuple[Any, Any]], graph: Graph, mesh: Mesh,
               axis: str, params: Any, rest: Any, inputs: Sequence[Any]) -> tuple[Any, Any, list[bool]]:
    """``per_replica(params, rest, local_inputs)`` on each device's own slice of ``inputs`` (``jax.shard_map`` over
    ``mesh``'s devices as a 1-D mesh named ``axis``, in the rank order of the batch's split):
    ``(losses, new_rest, stacked)``. The losses come back stacked over the replicas, as ``vmap`` stacks them; of
    the new state, each output that may differ between replicas is stacked (``stacked``, one flag per leaf, from
    the traced ``graph``: ``communication.varying``) and the others, the same on every replica (a state the step
    leaves alone), come back once, as ``vmap`` returns them unbatched. ``params`` are the graph's first inputs.

    ``check_vma=False``: the interpreter binds the graph's primitives as traced, without JAX's varying-axes types;
    the explicit reductions and ``stacked`` say what is reduced and what varies."""
    flat = Mesh(mesh.devices.reshape(-1), (axis,))
    split, whole = PartitionSpec(axis), PartitionSpec()
    leaves, treedef = jax.tree.flatten(params)
    scopes = [_scope(graph, v) for v in graph.inputs[:len(leaves)]]
    stacked = varying_outputs(graph.closed_jaxpr, [graph.values[v].kind == "input" for v in graph.inputs],
                              axis)[1:]

    def body(rows, rest, local):
        mine = [r[0] if s is None else _summed_over_replicas(r[0], axis, s) for r, s in zip(rows, scopes)]
        loss, new_rest = per_replica(jax.tree.unflatten(treedef, mine), rest, local)
        new_leaves, tree = jax.tree.flatten(new_rest)
        return loss[None], jax.tree.unflatten(tree, [v[None] if s else v for v, s in zip(new_leaves, stacked)])

    rest_specs = jax.tree.unflatten(jax.tree.structure(rest), [split if s else whole for s in stacked])
    losses, new_rest = jax.shard_map(body, mesh=flat, in_specs=(split, whole, [split] * len(inputs)),
                                     out_specs=(split, rest_specs), check_vma=False)(
        _rows(flat, axis)(leaves), rest, list(inputs))
    return losses, new_rest, stacked
