"""``nn.LayerNorm``, the MindSpore layer transformer ports build on (it was missing: AttributeError)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from tests.planner.helpers import forward, rand, reference


class Block(nn.Cell):
    def __init__(self, strategy=None):
        super().__init__()
        w = np.random.default_rng(0).normal(0, 0.25, (16, 16)).astype(np.float32)  # not the global RNG: seeds vary
        self.dense = nn.Dense(16, 16, weight_init=ms.Tensor(w), bias_init="zeros")
        self.ln = nn.LayerNorm((16,), epsilon=1e-5)
        if strategy is not None:
            self.ln.layer_norm.shard(strategy)

    def construct(self, x):
        return self.ln(self.dense(x))


def test_matches_the_formula():
    x = rand(4, 3, 16)
    out = np.asarray(reference(nn.LayerNorm((16,), epsilon=1e-5), x))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-5, atol=1e-5)
    assert [n for n, _ in Block().parameters_and_names()][-2:] == ["ln.gamma", "ln.beta"]


def test_sharded_as_mindspore_writes_it():
    out, _, graph = forward(Block(((8, 1), (1,), (1,))), rand(16, 16))
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Block(), rand(16, 16))), rtol=1e-5, atol=1e-5)
    assert graph.find("layer_norm")[0].strategy.in_strategy() == ((8, 1), (1,), (1,))


def test_bad_shape_is_named():
    with pytest.raises(TypeError, match="LayerNorm: normalized_shape"):
        nn.LayerNorm(16)
    assert ms.nn.LayerNorm is nn.LayerNorm
