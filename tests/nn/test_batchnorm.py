"""BatchNorm1d/2d and SyncBatchNorm: MindSpore's parameters and semantics, the moving-statistics update inside the
compiled step, and per-device against global statistics under DATA_PARALLEL (numbers against numpy)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn

EPS = 1e-5


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(1.0, 2.0, size=shape).astype(np.float32)


def np_bn(x, gamma, beta, mean=None, var=None):
    """Normalize NCHW/NC with given statistics, or with the batch's (biased variance)."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if mean is None:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + EPS) * gamma.reshape(shape) + beta.reshape(shape)


def test_parameters_names_and_defaults():
    bn = nn.BatchNorm2d(4)
    assert [(p.name, p.requires_grad) for p in bn.get_parameters()] == [
        ("mean", False), ("variance", False), ("gamma", True), ("beta", True)]
    np.testing.assert_array_equal(bn.moving_variance.asnumpy(), np.ones(4))
    assert bn.momentum == 0.9 and bn.eps == 1e-5 and bn.bn_train.attrs["momentum"] == pytest.approx(0.1)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.bn1 = nn.BatchNorm2d(4, affine=False)

    net = Net()
    assert [p.name for p in net.get_parameters()] == ["bn1.moving_mean", "bn1.moving_variance", "bn1.gamma",
                                                      "bn1.beta"]
    assert net.trainable_params() == []  # affine=False freezes gamma and beta


def test_train_uses_batch_statistics_and_updates_moving_ones_eagerly():
    bn = nn.BatchNorm2d(3, momentum=0.8, gamma_init="normal", beta_init="normal")
    bn.set_train(True)
    x = _x((4, 3, 5, 5))
    gamma, beta = bn.gamma.asnumpy(), bn.beta.asnumpy()
    np.testing.assert_allclose(np.asarray(bn(Tensor(x))), np_bn(x, gamma, beta), rtol=1e-4, atol=1e-5)
    n = 4 * 5 * 5
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3)) * n / (n - 1)  # unbiased into the moving variance
    np.testing.assert_allclose(bn.moving_mean.asnumpy(), 0.2 * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.asnumpy(), 0.8 + 0.2 * var, rtol=1e-5)


def test_eval_uses_moving_statistics():
    bn = nn.BatchNorm2d(3, moving_mean_init=Tensor(np.array([1.0, -1.0, 0.5], np.float32)),
                        moving_var_init=Tensor(np.array([4.0, 1.0, 0.25], np.float32)))
    bn.set_train(False)
    x = _x((2, 3, 4, 4))
    want = np_bn(x, np.ones(3), np.zeros(3), np.array([1.0, -1.0, 0.5]), np.array([4.0, 1.0, 0.25]))
    np.testing.assert_allclose(np.asarray(bn(Tensor(x))), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(bn.moving_mean.asnumpy(), [1.0, -1.0, 0.5])  # untouched


def test_use_batch_statistics_overrides_the_mode():
    x = _x((4, 3, 2, 2))
    always = nn.BatchNorm2d(3, use_batch_statistics=True).set_train(False)
    np.testing.assert_allclose(np.asarray(always(Tensor(x))), np_bn(x, np.ones(3), np.zeros(3)), rtol=1e-4,
                               atol=1e-5)
    never = nn.BatchNorm2d(3, use_batch_statistics=False).set_train(True)
    np.testing.assert_allclose(np.asarray(never(Tensor(x))), x / np.sqrt(1 + EPS), rtol=1e-5)


def test_batchnorm1d_on_nc_and_ncl():
    bn = nn.BatchNorm1d(5).set_train(True)
    for shape in [(8, 5), (4, 5, 3)]:
        x = _x(shape)
        np.testing.assert_allclose(np.asarray(bn(Tensor(x))), np_bn(x, np.ones(5), np.zeros(5)), rtol=1e-4,
                                   atol=1e-5)


@pytest.mark.parametrize("make,words", [
    (lambda: nn.BatchNorm2d(0), ["num_features", "positive"]),
    (lambda: nn.BatchNorm2d(4, momentum=1.5), ["momentum", "[0.0, 1.0]"]),
    (lambda: nn.BatchNorm2d(4, use_batch_statistics=1), ["use_batch_statistics"]),
    (lambda: nn.BatchNorm2d(4, data_format="NHWC"), ["NHWC", "NCHW"]),
    (lambda: nn.SyncBatchNorm(4, process_groups=[[0, 1], [2]]), ["process_groups", "equal-size"]),
])
def test_constructor_errors_name_the_argument(make, words):
    with pytest.raises(ValueError) as err:
        make()
    assert all(w in str(err.value) for w in words), str(err.value)


def test_wrong_input_shape_is_a_clear_error():
    with pytest.raises(ValueError, match=r"BatchNorm2d\(4\).*\(N, C, H, W\).*C = 4"):
        nn.BatchNorm2d(4)(Tensor(_x((2, 3, 2, 2))))


# --- inside compiled steps -------------------------------------------------------------------------------------------
W = np.random.default_rng(7).normal(size=(2, 12)).astype(np.float32)


class BNNet(nn.Cell):
    """BatchNorm over (N, 3, 2, 2) → flatten → Dense with weight W: the loss depends on how the batch was
    normalized."""

    def __init__(self, sync=False):
        super().__init__()
        self.bn = (nn.SyncBatchNorm if sync else nn.BatchNorm2d)(3, momentum=0.9)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(12, 2, weight_init=Tensor(W), bias_init="zeros")

    def construct(self, x):
        return self.fc(self.flatten(self.bn(x)))


def _train(mode, sync, x, y, steps=1, lr=0.0, pynative=False, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.PYNATIVE_MODE if pynative else ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True, **ctx)
    net = BNNet(sync)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), lr))
    losses = [float(train(x, y)) for _ in range(steps)]
    return net, losses


def _loss(x, y, w, groups):
    """MSE of the BNNet output when each group of rows is normalized with its own statistics."""
    outs = [np_bn(part, np.ones(3), np.zeros(3)).reshape(len(part), -1) @ w.T for part in np.split(x, groups)]
    return float(np.mean((np.concatenate(outs) - y) ** 2))


def _unbiased_var(part):
    n = part.size // part.shape[1]
    return part.var(axis=(0, 2, 3)) * n / (n - 1)


def test_moving_statistics_update_inside_the_compiled_step():
    x, y = _x((8, 3, 2, 2)), _x((8, 2), 1)
    net, losses = _train("stand_alone", False, x, y, steps=2)
    np.testing.assert_allclose(losses[0], _loss(x, y, W, 1), rtol=1e-5)
    keep = 0.9 ** 2  # two steps on the same batch
    np.testing.assert_allclose(net.bn.moving_mean.asnumpy(), (1 - keep) * x.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(net.bn.moving_variance.asnumpy(), keep + (1 - keep) * _unbiased_var(x), rtol=1e-5)


def test_data_parallel_statistics_are_per_device_by_default():
    x, y = _x((16, 3, 2, 2)), _x((16, 2), 1)
    net, losses = _train("data_parallel", False, x, y)
    np.testing.assert_allclose(losses[0], _loss(x, y, W, 8), rtol=1e-5)
    assert abs(losses[0] - _loss(x, y, W, 1)) > 1e-3  # not the global statistics
    # each device updates with its own statistics; graphpar keeps the replicas' average
    local_vars = np.mean([_unbiased_var(p) for p in np.split(x, 8)], axis=0)
    np.testing.assert_allclose(net.bn.moving_variance.asnumpy(), 0.9 + 0.1 * local_vars, rtol=1e-5)


@pytest.mark.parametrize("pynative", [False, True])
def test_sync_batchnorm_uses_global_statistics_under_data_parallel(pynative):
    x, y = _x((16, 3, 2, 2)), _x((16, 2), 1)
    net, losses = _train("data_parallel", True, x, y, pynative=pynative)
    np.testing.assert_allclose(losses[0], _loss(x, y, W, 1), rtol=1e-5)
    np.testing.assert_allclose(net.bn.moving_mean.asnumpy(), 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(net.bn.moving_variance.asnumpy(), 0.9 + 0.1 * _unbiased_var(x), rtol=1e-5)


def test_sync_batchnorm_process_groups():
    x, y = _x((16, 3, 2, 2)), _x((16, 2), 1)
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    net = BNNet()
    net.bn = nn.SyncBatchNorm(3, process_groups=[[0, 1, 2, 3], [4, 5, 6, 7]])
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.0))
    np.testing.assert_allclose(float(train(x, y)), _loss(x, y, W, 2), rtol=1e-5)


def test_sync_batchnorm_gradients_equal_one_device_with_the_global_batch():
    x, y = _x((16, 3, 2, 2)), _x((16, 2), 1)
    dp, _ = _train("data_parallel", True, x, y, steps=3, lr=0.1)
    sa, _ = _train("stand_alone", False, x, y, steps=3, lr=0.1)
    for a, b in zip(dp.get_parameters(), sa.get_parameters()):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-6, err_msg=a.name)


def test_sync_batchnorm_outside_a_per_rank_run_is_plain_batchnorm():
    x = _x((4, 3, 2, 2))
    sync = nn.SyncBatchNorm(3).set_train(True)
    np.testing.assert_allclose(np.asarray(sync(Tensor(x))), np_bn(x, np.ones(3), np.zeros(3)), rtol=1e-4,
                               atol=1e-5)


def test_moving_statistics_are_state_not_trained():
    x, y = _x((8, 3, 2, 2)), _x((8, 2), 1)
    net, _ = _train("stand_alone", False, x, y, lr=0.5)
    assert isinstance(net.bn.moving_mean, Parameter) and not net.bn.moving_mean.requires_grad
    assert all(p is not net.bn.moving_mean for p in net.trainable_params())
