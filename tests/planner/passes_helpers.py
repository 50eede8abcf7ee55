"""Shared by the tests that call planning passes directly: a small network traced and given its PlanContext the way
the compile stage does (``compile.staging.orchestrate.run_passes``: the plan's ``trace``, then its ``request``; the
hints read, the mesh and dataset layouts decided by the pipeline's first three passes)."""

import dataclasses

import jax
import numpy as np

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.compile.plans.choose import choose_plan
from graphpar.compile.lowering.network_state import current_state
from graphpar.ir.graph import Graph, Node
from graphpar.planner import planning as pipeline
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.passes.hints import read_hints
from graphpar.planner.passes.mesh_choice import choose_mesh, dataset_layouts

from .helpers import rand

QUICKSTART_HINT = ((2, 4), (4, 1))
PROPAGATION = {"parallel_mode": "auto_parallel", "search_mode": "sharding_propagation",
               "dataset_strategy": "data_parallel"}


class QuickstartNet(nn.Cell):
    """Seed 004's network (examples/quickstart.py): x (16, 32) @ w (32, 16) -> ReLU -> @ w2 (16, ``out``)."""

    def __init__(self, hint=QUICKSTART_HINT, out=16):
        super().__init__()
        self.weight = Parameter(Tensor(rand(32, 16, seed=1) * 0.1), "w")
        self.weight2 = Parameter(Tensor(rand(16, out, seed=2) * 0.1), "w2")
        self.matmul = ops.MatMul() if hint is None else ops.MatMul().shard(hint)
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul(x, self.weight)), self.weight2)


def traced(net: nn.Cell, *shapes: tuple[int, ...], **parallel) -> tuple[Graph, PlanContext]:
    """``net`` with an MSE loss traced as a train step on global inputs of ``shapes``, and the PlanContext its
    plan gives that graph under ``set_auto_parallel_context(**parallel)``: what the passes after ``read_hints``,
    ``choose_mesh`` and ``dataset_layouts`` read. ``pipeline.plan_graph(graph, ctx.request)`` plans it whole."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(**parallel)
    loss = nn.WithLossCell(net, nn.MSELoss())
    ns = current_state(None, loss, net.trainable_params())
    plan = choose_plan(loss)
    trace = plan.trace(ns, [jax.ShapeDtypeStruct(s, np.float32) for s in shapes], "train")
    request = plan.request(trace.graph, "train")
    graph = pipeline.plan_graph(trace.graph, request, (("read_hints", read_hints), ("choose_mesh", choose_mesh),
                                                       ("dataset_layouts", dataset_layouts)))
    return graph, PlanContext.of(request, graph.plan)


def with_request(ctx: PlanContext, **fields) -> PlanContext:
    """``ctx`` with these fields of its request replaced (a strategy file to force, ...)."""
    return dataclasses.replace(ctx, request=dataclasses.replace(ctx.request, **fields))


def quickstart(hint=QUICKSTART_HINT, out=16, **parallel) -> tuple[Graph, PlanContext]:
    return traced(QuickstartNet(hint, out), (16, 32), (16, out), **(parallel or PROPAGATION))


def node(graph: Graph, name: str) -> Node:
    (found,) = graph.find(name)
    return found


def run(graph: Graph, ctx: PlanContext, *passes) -> Graph:
    """``passes`` one after the other, as the pipeline runs them."""
    for fn in passes:
        graph = fn(graph, ctx)
    return graph


def in_strategies(graph: Graph) -> dict[str, tuple | None]:
    return {n.instance_name: None if n.strategy is None else n.strategy.in_strategy() for n in graph.node_list()}


def provenances(graph: Graph) -> dict[str, str | None]:
    return {n.instance_name: None if n.provenance is None else n.provenance.kind for n in graph.node_list()}
