"""MindSpore 2.x's functional pipeline step: ``value_and_grad`` of a ``PipelineCell``'s loss, ``PipelineGradReducer``,
``optimizer(grads)``, under ``@ms.jit`` with ``pipeline_stages > 1`` (``compile.functional.pipelined``). It runs
``Model.train``'s pipelined step (the same stage programs and schedules), its code between the gradient and the
update applied to the accumulated gradients; what it cannot pipeline is refused by name."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.models.mlp import DenseStack
from graphpar.nn.pipeline_cell import PipelineError
from graphpar.parallel.auto_parallel import AutoParallel

RNG = np.random.default_rng(3)
WEIGHTS = [(RNG.normal(size=(8, 8)) * 0.4).astype(np.float32) for _ in range(4)]
X = RNG.normal(size=(16, 8)).astype(np.float32)
Y = RNG.normal(size=(16, 8)).astype(np.float32)


def _network(segments=1):
    """4 Dense layers on 2 stages (``segments`` per stage: layers in model order on (stage, segment) as the
    zero_bubble_v V puts them), 4 micro-batches."""
    net = DenseStack(WEIGHTS)
    for i, layer in enumerate(net.layers):
        if segments == 1:
            layer.pipeline_stage = i // 2
        else:
            layer.pipeline_segment, layer.pipeline_stage = divmod(i, 2)
            if layer.pipeline_segment:
                layer.pipeline_stage = 1 - layer.pipeline_stage
    return net, nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4)


def _functional(steps=3, scale_sense=1.0, forward=None, wrap=None, segments=1):
    """The tutorial's loop on ``_network``; returns (losses, net, the last grads)."""
    net, net_with_loss = _network(segments)
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    pp_grad_reducer = nn.PipelineGradReducer(optimizer.parameters, scale_sense=scale_sense)

    def forward_fn(x, y):
        return net_with_loss(x, y) if forward is None else forward(net_with_loss, x, y)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

    @ms.jit
    def train_one_step(x, y):
        loss, grads = grad_fn(x, y)
        grads = pp_grad_reducer(grads)
        optimizer(grads)
        return loss, grads

    step = train_one_step if wrap is None else wrap(train_one_step)
    out = [step(X, Y) for _ in range(steps)]
    return [float(loss) for loss, _ in out], net, out[-1][1]


def _train_one_step_cell(steps=3, sens=None, segments=1):
    net, net_with_loss = _network(segments)
    train = nn.TrainOneStepCell(net_with_loss, nn.SGD(net.trainable_params(), 0.1), sens=sens)
    return [float(train(X, Y)) for _ in range(steps)], net


@pytest.fixture
def two_stages():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2)


def test_the_reducer_divides_the_accumulated_gradients_by_scale_sense(two_stages):
    losses, net, grads = _functional(scale_sense=2.0)
    expected, net_ref = _train_one_step_cell(sens=0.5)  # the gradient of 0.5 * loss: the same update
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    for p, q in zip(net.trainable_params(), net_ref.trainable_params()):
        np.testing.assert_allclose(p.asnumpy(), q.asnumpy(), rtol=1e-6, atol=1e-7)
    assert {d.id for d in grads[0].sharding.device_set} == {0, 1, 2, 3}  # layer 0's, on stage 0
    assert {d.id for d in grads[-1].sharding.device_set} == {4, 5, 6, 7}
    # unpipelined (pipeline_stages=1: the PipelineCell runs as written, the step is one SPMD program) alike
    ms.set_auto_parallel_context(pipeline_stages=1)
    unpipelined, _, _ = _functional(scale_sense=2.0)
    np.testing.assert_allclose(unpipelined, expected, rtol=1e-5)


def test_grad_operation_with_sens_trains_as_train_one_step_cell_with_sens(two_stages):
    """MindSpore 1.x's form: ``GradOperation(get_by_list=True, sens_param=True)`` of the PipelineCell itself."""
    net, net_with_loss = _network()
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    grad_op = ops.GradOperation(get_by_list=True, sens_param=True)

    @ms.jit
    def train_one_step(x, y):
        grads = grad_op(net_with_loss, optimizer.parameters)(x, y, ms.Tensor(0.5, ms.float32))
        optimizer(grads)

    for _ in range(3):
        train_one_step(X, Y)
    expected, net_ref = _train_one_step_cell(sens=0.5)
    for p, q in zip(net.trainable_params(), net_ref.trainable_params()):
        np.testing.assert_allclose(p.asnumpy(), q.asnumpy(), rtol=1e-6, atol=1e-7)


def test_zero_bubble_v_under_auto_parallel_equals_train_one_step_cell():
    ms.set_context(mode=ms.GRAPH_MODE)

    def wrap(step):
        parallel_net = AutoParallel(step, parallel_mode="semi_auto")
        parallel_net.pipeline(stages=2, interleave=True, scheduler="zero_bubble_v")
        return parallel_net

    losses, _, _ = _functional(wrap=wrap, segments=2)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2,
                                 pipeline_config={"pipeline_interleave": True, "pipeline_scheduler": "zero_bubble_v"})
    expected, _ = _train_one_step_cell(segments=2)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("forward, words", [
    (lambda pipe, x, y: pipe(x, y) * 2, r"returns something other than PipelineCell's loss"),
    (lambda pipe, x, y: pipe(x * 2, y), r"calls PipelineCell on other values than its own arguments"),
    (lambda pipe, x, y: pipe(x, y) + pipe(x, y), r"calls a PipelineCell 2 times"),
    (lambda pipe, x, y: pipe.network(x, y), r"calls none; differentiate a function returning the loss of "
                                            r"nn.PipelineCell"),
])
def test_a_step_the_pipeline_cannot_answer_is_refused_by_name(two_stages, forward, words):
    with pytest.raises(PipelineError, match=r"step function 'train_one_step': .*" + words):
        _functional(steps=1, forward=forward)


def test_reducer_arguments():
    params = nn.Dense(4, 2).trainable_params()
    with pytest.raises(ValueError, match="scale_sense must be a number > 0"):
        nn.PipelineGradReducer(params, scale_sense=0)
    with pytest.raises(TypeError, match="opt_shard must be a bool or None"):
        nn.PipelineGradReducer(params, opt_shard="yes")
    reducer = nn.PipelineGradReducer(params)
    grads = (np.ones((2, 4), np.float32), np.ones(2, np.float32))
    assert reducer(grads) is grads  # scale_sense 1: the accumulated gradients as they are
    with pytest.raises(ValueError, match="got 1 gradients for the 2 parameters"):
        reducer(grads[:1])
    assert ms.parallel.nn.PipelineGradReducer is nn.PipelineGradReducer
