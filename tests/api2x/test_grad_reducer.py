"""``nn.DistributedGradReducer`` returns what MindSpore's returns (the sum of the per-device gradients, divided by
``degree`` when ``mean``) without reducing graphpar's already-reduced gradient twice (``PipelineGradReducer``:
tests/functional/test_pipeline_step.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import CellError, ParallelModeError

X = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
Y = np.random.default_rng(1).normal(size=(16, 2)).astype(np.float32)


def _net_and_grad_fn():
    ms.set_seed(5)
    net = nn.Dense(4, 2)
    loss_fn = nn.MSELoss()
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, net.trainable_params())
    return net, grad_fn


def _per_device_sum(grad_fn, devices=8):
    """MindSpore's view: each device differentiates the mean loss of its slice; the AllReduce sums them."""
    slices = [grad_fn(Tensor(x), Tensor(y))[1] for x, y in zip(np.split(X, devices), np.split(Y, devices))]
    return [sum(np.asarray(g[k]) for g in slices) for k in range(len(slices[0]))]


@pytest.mark.parametrize("gradients_mean", [False, True])
def test_eager_loop_equals_mindspores_reduction(gradients_mean, notices):
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=gradients_mean)
    net, grad_fn = _net_and_grad_fn()
    total = _per_device_sum(grad_fn)
    _, grads = grad_fn(Tensor(X), Tensor(Y))  # eager: the whole batch's gradient on one device
    reduced = nn.DistributedGradReducer(net.trainable_params())(grads)
    for got, s in zip(reduced, total):
        np.testing.assert_allclose(np.asarray(got), s / 8 if gradients_mean else s, rtol=1e-5, atol=1e-6)
    halves = nn.DistributedGradReducer(net.trainable_params(), mean=True, degree=4)(grads)  # explicit degree
    for got, s in zip(halves, total):
        np.testing.assert_allclose(np.asarray(got), s / 4, rtol=1e-5, atol=1e-6)
    # the whole batch's gradient is read as a batch-mean loss's: said once, with what a summed loss would give
    assert notices.text.count("DistributedGradReducer outside a compiled step") == 1
    assert "For a loss that sums over the batch that is device-count times MindSpore's" in notices.text


def test_inside_a_compiled_step_the_plans_reduction_is_not_repeated():
    """In a compiled DATA_PARALLEL step the gradient is already the plan's sum of per-device gradients
    (gradients_mean=False): the reducer must leave it alone, not multiply it by the device count again."""
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=False)
    net, grad_fn = _net_and_grad_fn()
    total = [jnp.asarray(s) for s in _per_device_sum(grad_fn)]
    reducer = nn.DistributedGradReducer(net.trainable_params())
    out = jax.jit(lambda g: reducer(g))(tuple(total))
    for got, s in zip(out, total):
        np.testing.assert_allclose(np.asarray(got), np.asarray(s), rtol=1e-6)
    ms.set_auto_parallel_context(gradients_mean=True)  # the plan averaged: MindSpore's mean=True is the same
    out = jax.jit(lambda g: reducer(g))(tuple(s / 8 for s in total))
    for got, s in zip(out, total):
        np.testing.assert_allclose(np.asarray(got), np.asarray(s) / 8, rtol=1e-6)


def test_stand_alone_is_the_identity_and_bad_arguments_are_refused():
    net, grad_fn = _net_and_grad_fn()
    _, grads = grad_fn(Tensor(X), Tensor(Y))
    same = nn.DistributedGradReducer(net.trainable_params())(grads)
    assert all(a is b for a, b in zip(same, grads))
    with pytest.raises(ValueError, match="degree must be an int >= 1"):
        nn.DistributedGradReducer(net.trainable_params(), degree=0)
    with pytest.raises(CellError, match="sub-group is not built"):
        nn.DistributedGradReducer(net.trainable_params(), group="my_group")


@pytest.mark.parametrize("mode", ["semi_auto_parallel", "auto_parallel"])
def test_reducer_is_refused_in_a_graph_mode_planned_network(mode):
    """MindSpore's ``DistributedGradReducer._check_parallel_mode``: in GRAPH_MODE with SEMI_AUTO / AUTO the plan
    reduces the gradients, and building a reducer raises ``RuntimeError``; PYNATIVE_MODE builds it."""
    ms.set_auto_parallel_context(parallel_mode=mode)
    with pytest.raises(ParallelModeError, match=f"DistributedGradReducer in parallel_mode='{mode}'"):
        nn.DistributedGradReducer([])
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        assert nn.DistributedGradReducer([]).parameter_count == 0
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
