"""The shared small networks of graphpar.models.mlp and graphpar.models.megatron: names, strategies, stages."""

import numpy as np

from graphpar import ops
from graphpar.models.megatron import Megatron, MegatronMLP, QuickstartNet
from graphpar.models.mlp import HAND_PLANS, MLP, DeepFFN, DenseStack, search_mlp


def _names(net):
    return [p.name for p in net.get_parameters()]


def test_mlp_names_and_dropout():
    assert _names(MLP()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert MLP().drop is None and MLP(dropout=0.25).drop is not None
    np.testing.assert_array_equal(MLP(seed=3).fc1.weight.asnumpy(), MLP(seed=3).fc1.weight.asnumpy())
    assert np.std(MLP(64, 256, 8, scale=None).fc1.weight.asnumpy()) < 0.2  # 1/sqrt(64)


def test_dense_stack_strategies_and_stages():
    weights = [np.ones((4, 4), np.float32)] * 4
    net = DenseStack(weights, stages=2, matmul_strategies=[((2, 1), (4, 1)), None, None, None])
    assert [layer.pipeline_stage for layer in net.layers] == [0, 0, 1, 1]
    assert net.layers[0].matmul.in_strategy == ((2, 1), (4, 1)) and net.layers[1].matmul.in_strategy is None
    assert net.layers[2].activation is not None and net.layers[3].activation is None


def test_search_mlp_follows_the_hand_plan():
    net = search_mlp(2, 16, "megatron")
    assert [layer.matmul.in_strategy for layer in net.layers] == [HAND_PLANS["megatron"](i) for i in range(2)]
    assert net.layers[1].bias_add.in_strategy == ((1, 1), (1,))
    assert _names(DeepFFN(8, 2))[:2] == ["blocks.0.fc.weight", "blocks.0.fc.bias"]


def test_megatron_block_strategies_and_names():
    w1, w2 = np.zeros((8, 32), np.float32), np.zeros((32, 8), np.float32)
    block = MegatronMLP(w1, w2, dp=2, mp=4, activation=ops.ReLU().shard(((2, 4),)))
    assert block.matmul1.in_strategy == ((2, 1), (1, 4)) and block.matmul2.in_strategy == ((2, 4), (4, 1))
    assert block.activation.instance_name == "relu" and MegatronMLP(w1, w2).activation.instance_name == "gelu"
    assert _names(Megatron([MegatronMLP(w1, w2), MegatronMLP(w1, w2)])) == [
        "blocks.0.w1", "blocks.0.w2", "blocks.1.w1", "blocks.1.w2"]
    net = QuickstartNet(hint=None, weight_init=np.ones((32, 16), np.float32))
    assert _names(net) == ["w", "w2"] and net.matmul.in_strategy is None
    np.testing.assert_array_equal(net.weight.asnumpy(), 1.0)
