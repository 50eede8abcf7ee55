"""Tracing a network's train step or forward call into the graph IR.

Every GRAPH_MODE plan lowers a traced graph through ``compile.interpret``: the program XLA compiles is the user's
computation re-evaluated node by node under named scopes, which is what lets the execute dump attribute each
collective to its op. Both purposes return the network's updated non-trainable state after their result, so a
forward call in training mode (BatchNorm statistics) keeps its updates as MindSpore's graph mode does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

from graphpar.common.parameter import Parameter
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.ir.graph import Graph
from graphpar.ir.recorder import cell_scope
from graphpar.ir.trace import trace


def call_network(model: Any, inputs: Sequence[Any]) -> Any:
    """Run the network as the root of the program (scope ``Default``, as MindSpore's TrainOneStepCell)."""
    with cell_scope("Default"):
        return model(*inputs)


def _unplaced(value: Any) -> Any:
    if not isinstance(value, jax.Array):
        return value
    aval = jax.typeof(value)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def trace_network(ns: NetworkState, avals: Sequence[jax.ShapeDtypeStruct], purpose: str,
                  axis_env: Sequence[tuple[str, int]] | None = None,
                  call: Callable[[Any, Sequence[Any]], Any] | None = None, staged: bool = False,
                  defer_input_checks: bool = False, unplaced: bool = False) -> tuple[Graph, Any]:
    """``(graph, out_treedef)`` of ``purpose``: "train" gives ``[loss] + new rest state``, "forward" gives the
    network's output leaves (structure ``out_treedef``) + the new rest state. ``call(model, inputs)`` runs the
    network (default :func:`call_network`; a forward call with static arguments passes its own); ``staged`` and
    ``defer_input_checks``: see ``ir.trace.trace``. ``unplaced``: trace from the state's shapes and dtypes only,
    never the shardings of values already placed (a graph each device runs whole, inside a ``shard_map`` whose
    manual mesh is not the placement's: the same graph before and after the first placement)."""
    call = call or call_network
    pvals, rvals = ns.params.values(), ns.rest.values()
    if unplaced:
        pvals, rvals = [_unplaced(v) for v in pvals], [_unplaced(v) for v in rvals]
    rest_kinds = [("param" if isinstance(h, Parameter) else "state", n)
                  for h, n in zip(ns.rest.holders, ns.rest.names())]
    kinds = ([("param", n) for n in ns.param_names()] + rest_kinds
             + [("input", f"input{i}") for i in range(len(avals))])
    out_tree: list[Any] = [None]

    def fn(pv, rv, xs):
        model = ns.merge(ns.params.unflatten(pv), ns.rest.unflatten(rv))
        out = call(model, xs)
        leaves, out_tree[0] = jax.tree.flatten(out)
        return leaves + jax.tree.leaves(ns.split_after(model))

    graph = trace(fn, (pvals, rvals, list(avals)), kinds, name=f"{type(ns.network).__name__}_{purpose}",
                  axis_env=axis_env, staged=staged, defer_input_checks=defer_input_checks)
    if purpose == "train" and out_tree[0].num_leaves != 1:
        raise TypeError(f"{type(ns.network).__name__}: the loss network must return one loss array, got a "
                        f"structure of {out_tree[0].num_leaves} arrays ({out_tree[0]})")
    return graph, out_tree[0]
