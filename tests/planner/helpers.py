"""Shared by the parallel tests: plan a network, run its forward on 8 devices, count collectives."""

import re

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.runtime.forward import ForwardProgram
from graphpar.models.megatron import Megatron, MegatronMLP, QuickstartNet

COLLECTIVE = re.compile(r"= [^=]*? (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def collectives(hlo: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in hlo.splitlines():
        m = COLLECTIVE.search(line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def forward(cell, *inputs, mode="semi_auto_parallel", **ctx):
    """(output, compiled HLO text, planned graph) of ``cell``'s forward on 8 devices."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, **ctx)
    program = ForwardProgram(cell)
    out = program(*inputs)
    hlo = program.lower(*inputs).compile().as_text()
    return out, hlo, program.planned(*inputs).graph


def reference(cell, *inputs):
    """The same forward on one device, eagerly."""
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        return ForwardProgram(cell)(*inputs)
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


def strategies(graph) -> dict[str, tuple]:
    return {n.instance_name: n.strategy.in_strategy() for n in graph.node_list()}


def shard_shape(x) -> tuple:
    return x.sharding.shard_shape(x.shape)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def quickstart_net(hint=((2, 4), (4, 1))) -> QuickstartNet:
    """The seed quickstart's network (graphpar.models.megatron) with deterministic weights."""
    return QuickstartNet(hint=hint, weight_init=rand(32, 16, seed=1) * 0.1, weight2_init=rand(16, 16, seed=2) * 0.1)


def megatron(blocks=2, d=64, h=256) -> Megatron:
    """``blocks`` Megatron MLP blocks on 8 devices (column- then row-parallel MatMul, an unhinted GeLU)."""
    return Megatron([MegatronMLP(rand(d, h, seed=i) * 0.1, rand(h, d, seed=i + 10) * 0.1) for i in range(blocks)])


class OneOp(nn.Cell):
    """A Cell around one op call: construct(*xs) = op(*xs, *static)."""

    def __init__(self, op, *static):
        super().__init__()
        self.op = op
        self.static = static

    def construct(self, *xs):
        return self.op(*xs, *self.static)


def sharded(op, strategy, *static) -> OneOp:
    """:class:`OneOp` around ``op.shard(strategy)``."""
    return OneOp(op.shard(strategy), *static)


def kind_strategies(net, *xs, kind: str) -> list:
    """The planned strategies of the ops of MindSpore kind ``kind`` in ``net`` called on ``xs`` (strategy-table
    keys ``.../{kind}-op{n}``)."""
    return [v for k, v in ms.parallel.strategies(net, *xs).items() if f"/{kind}-op" in k]
