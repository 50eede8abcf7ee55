"""``Model.infer_predict_layout``: the predict network's parameter layouts as MindSpore's dictionary
(``(device_arrangement, tensor_map, slice_shape, field_size, uniform_split, opt_shard_group)``)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn, ops
from graphpar.errors import CellError


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w1 = ms.Parameter(ms.initializer("normal", (16, 32)), name="w1")
        self.w2 = ms.Parameter(ms.initializer("normal", (32, 8)), name="w2")
        self.matmul1 = ops.MatMul().shard(((2, 1), (1, 4)))
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul().shard(((2, 4), (4, 1)))

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul1(x, self.w1)), self.w2)


def test_layouts_of_a_semi_auto_predict_network():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=True)
    model = ms.Model(Net())
    x = Tensor(np.ones((8, 16), np.float32))
    layout = model.infer_predict_layout(x)
    assert set(layout) == {"w1", "w2"}
    # w1 is split 4-way on its columns, w2 4-way on its rows; the 2-way batch split repeats both
    assert layout["w1"] == ([2, 4], [-1, 0], [16, 8], 0, True, "")
    assert layout["w2"] == ([2, 4], [0, -1], [8, 8], 0, True, "")
    out = model.predict(x)  # the same program predicts
    assert out.shape == (8, 8)


def test_empty_outside_planned_modes_and_refused_in_pynative():
    model = ms.Model(Net())
    x = Tensor(np.ones((8, 16), np.float32))
    assert model.infer_predict_layout(x) == {}
    ms.set_context(mode=ms.PYNATIVE_MODE)
    with pytest.raises(CellError, match="infer_predict_layout.*GRAPH_MODE"):
        model.infer_predict_layout(x)
