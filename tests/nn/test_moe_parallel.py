"""The MoE layer alone under SEMI_AUTO_PARALLEL on 8 devices (the fast check; tests/planner/test_planner_gpt_moe.py
trains a whole MoE GPT): losses equal STAND_ALONE, and the dispatch and combine compile to all-to-alls over the
expert-parallel groups only.

Groups: the mesh is 8 = 2 x 2 x 2 (m0, m1, m2); the routing groups split over all three axes, the experts over the
last ep ones, the experts' data parallel over the first: with ep=4 the expert groups are {0,1,2,3} and {4,5,6,7},
with ep=2 (and model_parallel 2) {0,1}, {2,3}, ...
"""

import collections

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.dump.hlo import parse_collectives
from graphpar.nn.transformer import MoE, MoEConfig, MoEParallelConfig


class MoERegression(nn.Cell):
    """Mean squared error of the MoE's output against a target, plus its load-balancing loss."""

    def __init__(self, dp, ep, mp, group=None):
        super().__init__()
        ms.set_seed(1)  # the MoE's initializers draw from the global seed: both runs start equal
        self.moe = MoE(16, 32, 0.0, moe_config=MoEConfig(expert_num=8, num_experts_chosen=2, capacity_factor=1.0,
                                                         expert_group_size=group),
                       parallel_config=MoEParallelConfig(dp, mp, ep))
        self.sub = ops.Sub().shard(((dp, 1, 1), (dp, 1, 1)))
        self.square = ops.Square().shard(((dp, 1, 1),))
        self.mean = ops.ReduceMean().shard(((dp, 1, 1),))
        self.add = ops.Add().shard(((), ()))

    def construct(self, x, y):
        out, aux_loss = self.moe(x)
        return self.add(self.mean(self.square(self.sub(out, y))), aux_loss)


def _data():
    rng = np.random.default_rng(0)
    return [ms.Tensor(rng.normal(size=(8, 16, 16)).astype(np.float32)) for _ in range(2)]


def _train(mode, dp, ep, mp, group=None):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode)
    net = MoERegression(dp, ep, mp, group)
    return nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 1.0, 0.9))


@pytest.mark.parametrize("dp, ep, mp, groups, group", [
    (8, 4, 1, ((0, 1, 2, 3), (4, 5, 6, 7)), None),
    # router groups of 8 tokens (MoEConfig.expert_group_size): 16 groups, two per device, merged into the slots the
    # experts see: the same all-to-alls
    (8, 4, 1, ((0, 1, 2, 3), (4, 5, 6, 7)), 8),
    # model parallel 2 on the last mesh axis: the expert groups are the ranks 2 apart. (With dp < 8 the router's
    # OneHots put their repeated dimension first, as MindSpore's do, which adds small permutes of the routing.)
    pytest.param(4, 2, 2, ((0, 2), (1, 3), (4, 6), (5, 7)), None, marks=pytest.mark.slow)])
def test_moe_layer_all_to_alls_and_losses(dp, ep, mp, groups, group):
    data = _data()
    train = _train("semi_auto_parallel", dp, ep, mp, group)
    losses = [float(train(*data)) for _ in range(3)]
    hlo = train.program.stages(data).compiled.as_text()  # the program the steps ran
    collectives = parse_collectives(hlo, 8)
    kinds = collections.Counter((c.kind, c.backward, tuple(sorted(map(tuple, c.groups))))
                                for c in collectives if c.kind == "AlltoAll")
    # dispatch and combine forward; backward only the combine's (the input x is data: no gradient to dispatch)
    assert kinds == {("AlltoAll", False, groups): 2, ("AlltoAll", True, groups): 1}, kinds
    if mp == 1:  # the tokens are never gathered
        assert {c.kind for c in collectives} == {"AlltoAll", "AllReduce"}
    alone = _train("stand_alone", dp, ep, mp, group)
    np.testing.assert_allclose(losses, [float(alone(*data)) for _ in range(3)], rtol=1e-5)
    assert losses[-1] < losses[0]
