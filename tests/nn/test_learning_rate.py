"""Learning rates as MindSpore computes them: the ``nn.dynamic_lr`` lists (values of MindSpore's documented
examples), the ``LearningRateSchedule`` classes at given steps, and the step index a Model uses across ``train``
calls and evaluations (the list is read at the optimizer's update count, which nothing resets)."""

import math

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.train import Model


def test_dynamic_lr_lists_match_mindspore_examples():
    assert nn.piecewise_constant_lr([2, 5, 10], [0.1, 0.05, 0.01]) == [0.1] * 2 + [0.05] * 3 + [0.01] * 5
    np.testing.assert_allclose(nn.exponential_decay_lr(0.1, 0.9, 6, 2, 1), [0.1, 0.1, 0.09, 0.09, 0.081, 0.081])
    np.testing.assert_allclose(nn.natural_exp_decay_lr(0.1, 0.9, 6, 2, 2, True),
                               [0.1] * 4 + [0.016529888822158657] * 2)
    np.testing.assert_allclose(nn.inverse_decay_lr(0.1, 0.5, 6, 1, 1, True),
                               [0.1, 0.1 / 1.5, 0.05, 0.04, 0.1 / 3, 0.1 / 3.5])
    np.testing.assert_allclose(nn.cosine_decay_lr(0.01, 0.1, 6, 2, 2), [0.1, 0.1, 0.055, 0.055, 0.01, 0.01])
    np.testing.assert_allclose(nn.polynomial_decay_lr(0.1, 0.01, 6, 2, 2, 0.5),
                               [0.1, 0.1, 0.07363961030678928, 0.07363961030678928, 0.01, 0.01])
    # warm-up starts at 0: epoch 0 trains with rate 0 (MindSpore's documented output)
    np.testing.assert_allclose(nn.warmup_lr(0.1, 6, 2, 2), [0.0, 0.0, 0.05, 0.05, 0.1, 0.1])
    # update_decay_epoch: the decay restarts after decay_epoch epochs instead of staying at the end value
    assert nn.polynomial_decay_lr(0.1, 0.0, 6, 1, 2, 1.0, update_decay_epoch=True) == pytest.approx(
        [0.1, 0.05, 0.0, 0.025, 0.0, 1 / 60])


def test_schedules_at_given_steps():
    steps = np.arange(6)
    np.testing.assert_allclose(nn.ExponentialDecayLR(0.1, 0.9, 4)(steps), 0.1 * 0.9 ** (steps / 4), rtol=1e-6)
    np.testing.assert_allclose(nn.ExponentialDecayLR(0.1, 0.9, 4, is_stair=True)(steps),
                               0.1 * 0.9 ** (steps // 4), rtol=1e-6)
    # MindSpore's code decays by exp(-rate * step); decay_steps only sets the stair width
    np.testing.assert_allclose(nn.NaturalExpDecayLR(0.1, 0.9, 4)(steps), 0.1 * np.exp(-0.9 * steps), rtol=1e-6)
    np.testing.assert_allclose(nn.NaturalExpDecayLR(0.1, 0.9, 4, True)(steps), 0.1 * np.exp(-0.9 * (steps // 4 * 4)),
                               rtol=1e-6)
    np.testing.assert_allclose(nn.InverseDecayLR(0.1, 0.5, 2)(steps), 0.1 / (1 + 0.5 * steps / 2), rtol=1e-6)
    cos = nn.CosineDecayLR(0.01, 0.1, 4)(steps)
    np.testing.assert_allclose(cos, [0.01 + 0.045 * (1 + math.cos(math.pi * min(s, 4) / 4)) for s in steps],
                               rtol=1e-6)
    np.testing.assert_allclose(nn.PolynomialDecayLR(0.1, 0.01, 4, 0.5)(steps),
                               [0.09 * (1 - min(s, 4) / 4) ** 0.5 + 0.01 for s in steps], rtol=1e-6, atol=1e-7)
    restart = nn.PolynomialDecayLR(0.1, 0.0, 2, 1.0, update_decay_steps=True)(steps)
    np.testing.assert_allclose(restart, [0.1, 0.05, 0.0, 0.025, 0.0, 1 / 60], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(nn.WarmUpLR(0.1, 2)(steps), [0.0, 0.05, 0.1, 0.1, 0.1, 0.1], rtol=1e-6)


@pytest.mark.parametrize("make, message", [
    (lambda: nn.CosineDecayLR(0.1, 0.01, 4), "max_lr must be greater than min_lr"),
    (lambda: nn.WarmUpLR(0.1, 0), "warmup_steps must be an int >= 1"),
    (lambda: nn.PolynomialDecayLR(0.1, 0.0, 4, 1.0, update_decay_steps=1), "update_decay_steps must be a bool"),
    (lambda: nn.cosine_decay_lr(0.0, 0.1, 10, 0, 2), "step_per_epoch must be an int >= 1"),
    (lambda: nn.piecewise_constant_lr([2, 1], [0.1, 0.2]), "milestone must increase"),
])
def test_bad_schedule_arguments_name_the_argument(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def _net_and_data():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dense(8, 3)])
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 4)).astype(np.float32), rng.integers(0, 3, 64).astype(np.int32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=True).batch(4, drop_remainder=True)
    return net, data


def _state(net, opt):
    import jax

    return ({p.name: p.asnumpy().copy() for p in net.get_parameters()},
            [np.asarray(v) for v in jax.tree_util.tree_leaves(opt.opt_state)])


def test_train_calls_and_eval_keep_the_step_the_lr_and_the_moving_statistics():
    """train(3) equals train(1); eval; train(2, initial_epoch=1); eval; train(3, initial_epoch=2) bitwise: the
    per-step learning rate goes on from the optimizer's update count, evaluation writes no state, and each epoch
    sees its own shuffle."""
    lr = nn.cosine_decay_lr(0.0, 0.5, 6, 2, 3)  # 3 epochs x 2 steps: the rate changes every epoch
    results = []
    for split in (False, True):
        ds.config.set_seed(3)
        net, data = _net_and_data()
        data = data.take(2)
        opt = nn.Momentum(net.trainable_params(), lr, 0.9)
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt, metrics={"acc"})
        if split:
            for epoch in range(3):
                model.train(epoch + 1, data, initial_epoch=epoch)
                model.eval(data)
        else:
            model.train(3, data)
        results.append(_state(net, opt))
    (params_a, opt_a), (params_b, opt_b) = results
    assert params_a.keys() == params_b.keys() and any("moving_mean" in k for k in params_a)
    for name in params_a:
        np.testing.assert_array_equal(params_a[name], params_b[name], err_msg=name)
    assert len(opt_a) == len(opt_b)
    for a, b in zip(opt_a, opt_b):
        np.testing.assert_array_equal(a, b)
    assert 6 in [int(v) for v in opt_a if v.ndim == 0]  # the update count: 3 epochs x 2 steps


def test_a_learning_rate_list_shorter_than_the_run_is_said_once(notices):
    ds.config.set_seed(0)
    net, data = _net_and_data()
    opt = nn.Momentum(net.trainable_params(), nn.cosine_decay_lr(0.0, 0.1, 4, 2, 2), 0.9)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt)
    model.train(1, data.take(2))  # updates 0..1 of 4: nothing to say
    assert "learning-rate list" not in notices.text
    model.train(2, data.take(2))  # a second call goes on from update 2: updates 2..5
    assert "the learning-rate list has 4 values (one per step), but this run takes updates 2..5" in notices.text


def test_dataset_sink_reads_the_same_per_step_rates():
    """Sink mode (a whole epoch per call, or one step per sink with sink_size=1) takes the rate of every step from
    the same update count as the step-by-step loop: the three runs end bitwise equal."""
    lr = nn.cosine_decay_lr(0.0, 0.5, 6, 2, 3)
    results = []
    for kwargs in ({}, {"dataset_sink_mode": True}, {"dataset_sink_mode": True, "sink_size": 1}):
        ds.config.set_seed(3)
        net, data = _net_and_data()
        opt = nn.Momentum(net.trainable_params(), lr, 0.9)
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt)
        model.train(6 if kwargs.get("sink_size") == 1 else 3, data.take(2), **kwargs)
        results.append(_state(net, opt))
    for params, opt_state in results[1:]:
        for name, value in results[0][0].items():
            np.testing.assert_array_equal(value, params[name], err_msg=name)
        assert [int(v) for v in opt_state if v.ndim == 0] == [6]
