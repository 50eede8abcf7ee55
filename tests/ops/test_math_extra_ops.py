"""Invert, PopulationCount, HShrink, ApproximateEqual, Tril, CumProd, SquareSumAll, LpNorm, Cholesky, Eye
and FillV2 against numpy, and their MindSpore sharding: elementwise ops split every dim (Tril's matrix dims too),
CumProd keeps its axis whole, reductions reduce a split dim across devices, Cholesky keeps its matrices whole."""

import math

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import kind_strategies, sharded

X = np.random.default_rng(0).uniform(-2, 2, (8, 4, 4)).astype(np.float32)


def test_elementwise_ops():
    ints = np.array([[0, 1, 7, -1]], np.int16)
    np.testing.assert_array_equal(np.asarray(P.Invert()(Tensor(ints))), ~ints)
    pop = np.asarray(P.PopulationCount()(Tensor(ints)))
    assert pop.dtype == np.uint8 and pop.tolist() == [[0, 1, 3, 16]]
    np.testing.assert_allclose(np.asarray(P.HShrink(1.0)(Tensor(X))), np.where(np.abs(X) > 1.0, X, 0))
    np.testing.assert_array_equal(np.asarray(P.ApproximateEqual(0.5)(Tensor(X), Tensor(X + 0.25))), True)
    np.testing.assert_allclose(np.asarray(P.Tril(-1)(Tensor(X))), np.tril(X, -1))


@pytest.mark.parametrize("exclusive, reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cum_prod(exclusive, reverse):
    got = np.asarray(P.CumProd(exclusive, reverse)(Tensor(X), 1))
    x = X[:, ::-1] if reverse else X
    want = np.cumprod(x, 1)
    if exclusive:
        want = np.concatenate([np.ones_like(want[:, :1]), want[:, :-1]], 1)
    np.testing.assert_allclose(got, want[:, ::-1] if reverse else want, rtol=1e-5)


def test_reductions_and_matrices():
    a, b = P.SquareSumAll()(Tensor(X), Tensor(2 * X))
    np.testing.assert_allclose([np.asarray(a), np.asarray(b)], [np.sum(X ** 2), np.sum(4 * X ** 2)], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(P.LpNorm([0, 2], 3, True)(Tensor(X))),
                               np.sum(np.abs(X) ** 3, (0, 2), keepdims=True) ** (1 / 3), rtol=1e-5)
    spd = X @ X.transpose(0, 2, 1) + 4 * np.eye(4, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(P.Cholesky()(Tensor(spd))), np.linalg.cholesky(spd), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(P.Cholesky(True)(Tensor(spd))),
                               np.linalg.cholesky(spd).transpose(0, 2, 1), rtol=1e-4)
    assert np.asarray(P.Eye()(2, 3, ms.int32)).tolist() == [[1, 0, 0], [0, 1, 0]]
    filled = np.asarray(P.FillV2()(Tensor(np.array([2, 3], np.int32)), Tensor(1.5, ms.float32)))
    assert filled.shape == (2, 3) and filled.dtype == np.float32 and (filled == 1.5).all()


def test_tril_splits_its_matrix_dims_and_stays_exact():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = sharded(P.Tril(1), ((2, 2, 2),))
    assert kind_strategies(net, Tensor(X), kind="Tril") == [[[2, 2, 2]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(X))), np.tril(X, 1))


def test_lp_norm_reduces_a_split_input_across_devices():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = sharded(P.LpNorm([1, 2]), ((2, 2, 2),))
    assert kind_strategies(net, Tensor(X), kind="LpNorm") == [[[2, 2, 2]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(X))), np.sqrt(np.sum(X ** 2, (1, 2))), rtol=1e-5)


def test_cum_prod_axis_and_cholesky_matrices_stay_whole():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    with pytest.raises(StrategyError, match="CumProd cannot split x dim 1"):
        kind_strategies(sharded(P.CumProd(), ((2, 2, 1),), 1), Tensor(X), kind="CumProd")
    with pytest.raises(StrategyError, match="Cholesky cannot split input_x dim 2"):
        kind_strategies(sharded(P.Cholesky(), ((4, 1, 2),)), Tensor(X), kind="Cholesky")


def test_running_extremes_reverse_and_elementwise_extras():
    values, indices = P.Cummax(1)(Tensor(X))
    np.testing.assert_allclose(np.asarray(values), np.maximum.accumulate(X, 1))
    np.testing.assert_array_equal(np.take_along_axis(X, np.asarray(indices), 1), np.maximum.accumulate(X, 1))
    values, _ = P.Cummin(-1)(Tensor(X))
    np.testing.assert_allclose(np.asarray(values), np.minimum.accumulate(X, -1))
    np.testing.assert_allclose(np.asarray(P.ReverseV2([0, 2])(Tensor(X))), X[::-1, :, ::-1])
    np.testing.assert_allclose(np.asarray(P.Trunc()(Tensor(X))), np.trunc(X))
    np.testing.assert_allclose(np.asarray(P.Elu(0.5)(Tensor(X))), np.where(X > 0, X, 0.5 * np.expm1(X)), rtol=1e-5)
    pos = np.abs(X) + 0.5
    np.testing.assert_allclose(np.asarray(P.Lgamma()(Tensor(pos))), np.vectorize(math.lgamma)(pos), atol=1e-5)
