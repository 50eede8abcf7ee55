"""Sparse cross-entropy takes class indices: a float label is refused by name, not truncated to a class (issue 27,
item 2's dtype half: MindSpore's kernel takes int32/int64 labels only)."""

from __future__ import annotations

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops


def _train_cell():
    net = nn.Dense(4, 4, weight_init=ms.Tensor(np.eye(4, dtype=np.float32)), bias_init="zeros")
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.1, 0.9))


def test_integer_labels_train():
    x = np.eye(4, dtype=np.float32)
    loss = float(_train_cell()(ms.Tensor(x), ms.Tensor(np.arange(4, dtype=np.int32))))
    assert loss == pytest.approx(-np.log(np.e / (np.e + 3)), rel=1e-5)


@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_float_labels_are_refused_by_name(mode):
    ms.set_context(mode=mode)
    try:
        with pytest.raises(TypeError, match=r"SoftmaxCrossEntropyWithLogits\(sparse=True\).*integer dtype.*float32"):
            _train_cell()(ms.Tensor(np.eye(4, dtype=np.float32)), ms.Tensor(np.array([0, 1, 2.7, 3], np.float32)))
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


def test_the_primitive_refuses_float_labels_too():
    with pytest.raises(TypeError, match=r"SparseSoftmaxCrossEntropyWithLogits: .*integer dtype"):
        ops.SparseSoftmaxCrossEntropyWithLogits()(ms.Tensor(np.zeros((2, 3), np.float32)),
                                                  ms.Tensor(np.array([0.0, 1.0], np.float32)))
