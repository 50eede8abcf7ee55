"""Parameters read in different layouts are reported once per set of reader ops, not once per Parameter.

Seen porting seeds 000/003 (ResNet-50, AUTO_PARALLEL): 54 lines "Parameter 'layerN.x.bnM.moving_mean' is read by
bn_train, mul in different layouts ...", one per BatchNorm statistic; now one line with the count, the first and
last names and the bytes in all, each Parameter at DEBUG and in the begin dump (``graph.plan.param_conflicts``).
"""

import logging

import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.common.parameter import Parameter


class Shared(nn.Cell):
    """A weight read by a hinted MatMul (split by columns) and an unhinted Add (data parallel: split by rows)."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(ms.Tensor(np.full((16, 16), 0.01, np.float32)), "w")
        self.mm1 = ops.MatMul().shard(((1, 1), (1, 8)))
        self.add = ops.Add()

    def construct(self, x):
        return self.add(self.w, self.mm1(x, self.w))


def _plan(blocks: int):
    """The train step's plan: the weight's gradient makes the cheaper layout cost bytes."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    net = nn.SequentialCell([Shared() for _ in range(blocks)])
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    x = np.ones((16, 16), np.float32)
    return train.program.planned([x, x]).graph


def test_repeated_conflicts_are_one_warning(notices):
    notices.set_level(logging.DEBUG, logger="graphpar")
    graph = _plan(5)
    costly = [c for c in graph.plan.param_conflicts if c["cost_bytes"] > 0]
    assert len(costly) == 5
    warned = [r.getMessage() for r in notices.records if r.levelno == logging.WARNING and "different layouts" in
              r.getMessage()]
    assert len(warned) == 1, warned
    total = sum(c["cost_bytes"] for c in costly)
    assert warned[0].startswith(f"5 Parameters ({costly[0]['parameter']} ... {costly[-1]['parameter']}) are each "
                                "read by mm1, add") and f"{total:g} bytes per device per step in all" in warned[0]
    each = [r.getMessage() for r in notices.records if r.levelno == logging.DEBUG and "different layouts" in
            r.getMessage()]
    assert sorted(m.split("'")[1] for m in each) == sorted(c["parameter"] for c in costly)


def test_a_single_conflict_keeps_its_own_line(notices):
    graph = _plan(1)
    warned = [r.getMessage() for r in notices.records if r.levelno == logging.WARNING and "different layouts" in
              r.getMessage()]
    name = graph.plan.param_conflicts[0]["parameter"]
    assert len(warned) == 1 and warned[0].startswith(f"Parameter '{name}' is read by mm1, add"), warned
