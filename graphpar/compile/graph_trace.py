"""Tracing a network's train or forward step into the graph IR, and the per-plan cache of traced graphs.

Every GRAPH_MODE plan lowers a traced graph through ``compile.interpret``: the program XLA compiles is the user's
computation re-evaluated node by node under named scopes, which is what lets the execute dump attribute each
collective to its op. ``GraphCache`` keeps one planned graph per (purpose, structure epoch, input signature).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from graphpar.common.parameter import Parameter
from graphpar.compile.state import NetworkState
from graphpar.ir.graph import Graph
from graphpar.ir.trace import trace


def call_network(model: Any, inputs: Sequence[Any]) -> Any:
    """Run the loss network as the root of the train step (scope ``Default``, as MindSpore's TrainOneStepCell)."""
    from graphpar.ir.recorder import cell_scope

    with cell_scope("Default"):
        return model(*inputs)


def trace_network(ns: NetworkState, avals: Sequence[jax.ShapeDtypeStruct], purpose: str,
                  axis_env: Sequence[tuple[str, int]] | None = None) -> Graph:
    """The graph of ``purpose`` ("train": loss and updated state; "forward": the network's outputs)."""
    pvals, rvals = ns.params.values(), ns.rest.values()
    rest_kinds = [("param" if isinstance(h, Parameter) else "state", n)
                  for h, n in zip(ns.rest.holders, ns.rest.names())]
    kinds = ([("param", n) for n in ns.param_names()] + rest_kinds
             + [("input", f"input{i}") for i in range(len(avals))])

    def run(pv, rv, xs):
        model = ns.merge(ns.params.unflatten(pv), ns.rest.unflatten(rv))
        return model, call_network(model, xs)

    def train_fn(pv, rv, xs):
        model, loss = run(pv, rv, xs)
        return [loss] + jax.tree.leaves(ns.split_after(model))

    def forward_fn(pv, rv, xs):
        return jax.tree.leaves(run(pv, rv, xs)[1])

    fn = train_fn if purpose == "train" else forward_fn
    graph = trace(fn, (pvals, rvals, list(avals)), kinds, name=f"{type(ns.network).__name__}_{purpose}",
                  axis_env=axis_env)
    if purpose == "forward":
        out = jax.eval_shape(lambda pv, rv, xs: run(pv, rv, xs)[1], pvals, rvals, list(avals))
        graph.meta["out_treedef"] = jax.tree.structure(out)
    return graph


def signature(inputs: Sequence[Any]) -> tuple:
    return tuple((tuple(np.shape(x)), str(np.dtype(x.dtype))) for x in inputs)


class GraphCache:
    """Planned graphs by (purpose, structure epoch, input signature)."""

    def __init__(self) -> None:
        self._graphs: dict[tuple, Graph] = {}
        self.last: Graph | None = None

    def get_or_plan(self, ns: NetworkState, inputs: Sequence[Any], purpose: str,
                    plan_fn: Callable[[NetworkState, Sequence[Any], str], Graph]) -> Graph:
        key = (purpose, ns.epoch, signature(inputs))
        graph = self._graphs.get(key)
        if graph is None:
            graph = plan_fn(ns, inputs, purpose)
            self._graphs[key] = graph
        self.last = graph
        return graph

    def for_inputs(self, purpose: str, inputs: Sequence[Any]) -> Graph:
        sig = signature(inputs)
        for (p, _, s), graph in self._graphs.items():
            if p == purpose and s == sig:
                return graph
        raise RuntimeError(f"graphpar: no plan was prepared for {purpose} inputs {sig}")
