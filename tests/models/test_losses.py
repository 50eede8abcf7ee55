"""SoftmaxCrossEntropyExpand: the tutorials' code runs as written (``mindspore`` → ``graphpar``), and training with it
equals training with nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.models import SoftmaxCrossEntropyExpand

# Seeds 000/003, verbatim apart from the package name.
SEED_LOSS = '''
import mindspore.ops as ops
from mindspore import Tensor
from mindspore import dtype as mstype
import mindspore.nn as nn


class SoftmaxCrossEntropyExpand(nn.Cell):
    def __init__(self, sparse=False):
        super(SoftmaxCrossEntropyExpand, self).__init__()
        self.exp = ops.Exp()
        self.sum = ops.ReduceSum(keep_dims=True)
        self.onehot = ops.OneHot()
        self.on_value = Tensor(1.0, mstype.float32)
        self.off_value = Tensor(0.0, mstype.float32)
        self.div = ops.RealDiv()
        self.log = ops.Log()
        self.sum_cross_entropy = ops.ReduceSum(keep_dims=False)
        self.mul = ops.Mul()
        self.mul2 = ops.Mul()
        self.mean = ops.ReduceMean(keep_dims=False)
        self.sparse = sparse
        self.max = ops.ReduceMax(keep_dims=True)
        self.sub = ops.Sub()

    def construct(self, logit, label):
        logit_max = self.max(logit, -1)
        exp = self.exp(self.sub(logit, logit_max))
        exp_sum = self.sum(exp, -1)
        softmax_result = self.div(exp, exp_sum)
        if self.sparse:
            label = self.onehot(label, ops.shape(logit)[1], self.on_value, self.off_value)
        softmax_result_log = self.log(softmax_result)
        loss = self.sum_cross_entropy((self.mul(softmax_result_log, label)), -1)
        loss = self.mul2(ops.scalar_to_array(-1.0), loss)
        loss = self.mean(loss, -1)

        return loss
'''


def seed_loss_class():
    namespace: dict = {}
    exec(compile(SEED_LOSS.replace("mindspore", "graphpar"), "seed_loss", "exec"), namespace)
    return namespace["SoftmaxCrossEntropyExpand"]


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(3)
        self.fc1 = nn.Dense(12, 16, weight_init=ms.Tensor(rng.normal(0, 0.3, (16, 12)).astype(np.float32)),
                            bias_init="zeros", activation="relu")
        self.fc2 = nn.Dense(16, 5, weight_init=ms.Tensor(rng.normal(0, 0.3, (5, 16)).astype(np.float32)),
                            bias_init="zeros")

    def construct(self, x):
        return self.fc2(self.fc1(x))


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 12)).astype(np.float32), rng.integers(0, 5, 16).astype(np.int32)


def _train(loss, mode="stand_alone", steps=5):
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    net = Net()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    x, y = _data()
    losses = [float(train(x, y)) for _ in range(steps)]
    return {p.name: p.asnumpy() for p in net.get_parameters()}, losses


@pytest.mark.parametrize("make", [lambda: SoftmaxCrossEntropyExpand(sparse=True),
                                  lambda: seed_loss_class()(sparse=True)], ids=["graphpar.models", "seed code"])
@pytest.mark.parametrize("mode", ["stand_alone", "data_parallel", "auto_parallel"])
def test_trains_like_softmax_cross_entropy_with_logits(make, mode):
    ours, our_losses = _train(make(), mode)
    ref, ref_losses = _train(nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), mode)
    np.testing.assert_allclose(our_losses, ref_losses, rtol=1e-5)
    for name in ref:
        np.testing.assert_allclose(ours[name], ref[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_one_hot_labels_and_value():
    loss = SoftmaxCrossEntropyExpand()
    logits = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[[0, 2, 1, 1]]
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(float(loss(ms.Tensor(logits), ms.Tensor(labels))), -np.mean((log_p * labels).sum(-1)),
                               rtol=1e-6)


def test_op_instance_names_match_the_tutorial():
    loss = SoftmaxCrossEntropyExpand(sparse=True)
    assert [loss.exp.instance_name, loss.max.instance_name, loss.sum_cross_entropy.instance_name] == [
        "exp", "max", "sum_cross_entropy"]
