"""MindSpore 2.x's generated ``Ext`` ops as its arithmetic tests use them: ``ops.auto_generate.gen_ops_def.sub_ext``
/ ``add_ext`` (``input -/+ alpha * other``) and the module-level ``ops.auto_generate.addcmul_ext_op`` sharded with
one strategy per tensor input (the scalar ``value`` takes none)."""

import re

import numpy as np

import graphpar as ms
from graphpar import Tensor, context, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.ops import operations as P


def setup_function():
    # as MindSpore's parallel test files do: the shapes given to _cell_graph_executor.compile are the whole batch
    # (without full_batch MindSpore reads them as one rank's slice, graphpar.compile.plans.global_batch)
    context.set_auto_parallel_context(dataset_strategy="full_batch")


def test_ext_ops_compute():
    x, y = np.array([5.0, 1.0], np.float32), np.array([2.0, 3.0], np.float32)
    assert np.asarray(ops.auto_generate.gen_ops_def.sub_ext(x, y, 2.0)).tolist() == [1.0, -5.0]
    assert np.asarray(ops.auto_generate.gen_ops_def.add_ext(x, y)).tolist() == [7.0, 4.0]
    assert np.asarray(ops.auto_generate.AddcmulExt()(x, y, y, 0.5)).tolist() == [7.0, 5.5]


class AddcmulExtNet(nn.Cell):
    def __init__(self, strategy1=None, strategy2=None):
        super().__init__()
        self.matmul = P.MatMul().shard(strategy1)
        self.addcmul = ops.auto_generate.addcmul_ext_op.shard(strategy2)
        self.value = 1

    def construct(self, x, y, tensor1, tensor2):
        return ops.auto_generate.gen_ops_def.sub_ext(self.addcmul(self.matmul(x, y), tensor1, tensor2, self.value),
                                                     tensor1, 1.0)


def test_addcmul_ext_strategy_broadcasts():
    context.set_auto_parallel_context(device_num=16, global_rank=0, parallel_mode="semi_auto_parallel")
    net = AddcmulExtNet(((4, 2), (2, 2)), ((4, 2), (2, 4, 2), (2,)))
    net.set_train()
    _cell_graph_executor.compile(net, Tensor(np.ones([64, 32]), ms.float32), Tensor(np.ones([32, 8]), ms.float32),
                                 Tensor(np.ones([2, 64, 8]), ms.float32), Tensor(np.ones([8]), ms.float32))
    strategies = _cell_graph_executor._get_shard_strategy(net)
    assert [v for k, v in strategies.items() if re.search("AddcmulExt-op", k)] == [[[4, 2], [2, 4, 2], [2]]]
    assert len([k for k in strategies if re.search("SubExt-op", k)]) == 1
    AddcmulExtNet()  # shard(None) clears the shared instance's strategy, as in MindSpore
    assert ops.auto_generate.addcmul_ext_op.in_strategy is None
