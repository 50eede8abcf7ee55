"""What ``graphpar.jit`` refuses, by name, and the arguments it takes from both generations of MindSpore's ``jit``."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.errors import JitError

from tests.functional.steps import X, Y, Net


def _parts():
    net = Net()
    return net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9)


def test_a_step_with_two_gradients_or_no_optimizer_is_refused_by_name():
    net, loss_fn, optimizer = _parts()

    def forward_fn(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

    @ms.jit
    def two_gradients(x, y):
        _, g1 = grad_fn(x, y)
        loss, _ = grad_fn(x, y)
        optimizer(g1)
        return loss

    with pytest.raises(JitError, match=r"two_gradients\): the step takes 2 gradients \(value_and_grad of "
                                       r"'forward_fn', value_and_grad of 'forward_fn'\)"):
        two_gradients(X, Y)

    @ms.jit
    def no_update(x, y):
        loss, _ = grad_fn(x, y)
        return loss

    with pytest.raises(JitError, match="no_update\\): the step calls no optimizer; a compiled step applies"):
        no_update(X, Y)


def test_a_non_scalar_loss_is_refused_by_name():
    net, _, optimizer = _parts()
    per_sample = ms.value_and_grad(lambda x, y: ((net(x) - y) ** 2).mean(axis=1), None, optimizer.parameters)

    @ms.jit
    def vector_loss(x, y):
        loss, grads = per_sample(x, y)
        optimizer(grads)
        return loss

    with pytest.raises(JitError, match=r"returns a loss of shape \(16,\); a compiled step differentiates a scalar"):
        vector_loss(X, Y)


def test_jit_arguments_are_built_or_refused_by_name(notices):
    with pytest.raises(JitError, match="backend='GE' .* is not available"):
        ms.jit(lambda x: x, backend="GE")
    with pytest.raises(JitError, match="compile_once=True is not built"):
        ms.jit(lambda x: x, compile_once=True)
    with pytest.raises(JitError, match="backend option 'infer_boost' has no XLA equivalent"):
        ms.jit(lambda x: x, infer_boost="on")
    with pytest.raises(JitError, match="capture_mode='graph'; valid: 'ast', 'bytecode', 'trace'"):
        ms.jit(capture_mode="graph")(lambda x: x)
    with pytest.raises(JitError, match="unknown option 'mode'"):
        ms.JitConfig(mode="x")
    with pytest.raises(JitError, match="jit of a Cell object is not built"):
        ms.jit(Net())

    @ms.jit(jit_level="O1", dynamic=1, jit_config=ms.JitConfig(exc_mode="sink"),
            input_signature=(ms.Tensor(X), ms.Tensor(Y)))
    def add(x, y):
        return x.sum() + y.sum()

    np.testing.assert_allclose(float(add(X, Y)), X.sum() + Y.sum(), rtol=1e-5)  # no gradient: runs as written
    said = " | ".join(r.getMessage() for r in notices.records)
    for words in ("jit_level='O1': XLA applies its own optimisation pipeline",
                  "dynamic=1): XLA compiles static shapes", "JitConfig(exc_mode='sink')",
                  "the function takes no gradient, so graphpar runs it as written"):
        assert words in said
    with pytest.raises(JitError, match=r"input 1 is float32\[4, 8\]; input_signature gives float32\[16, 8\]"):
        add(X, Y[:4])
    with pytest.raises(JitError, match="keyword argument\\(s\\) \\['y'\\]"):
        add(X, y=Y)
