"""BoundingBoxEncode, TraceV2 and SolveTriangular against numpy, and the dims MindSpore's OperatorInfo keeps
whole (box coordinates, traced axes, matrix dims)."""

import numpy as np
import pytest
import scipy.linalg

import graphpar as ms
from graphpar import Tensor
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import kind_strategies, sharded

ANCHORS = np.array([[0, 0, 3, 3], [2, 2, 5, 7], [1, 0, 2, 9], [4, 4, 4, 4]] * 2, np.float32)
GT = np.array([[1, 1, 4, 4], [0, 0, 9, 9]] * 4, np.float32)


def test_bounding_box_encode_deltas():
    got = np.asarray(P.BoundingBoxEncode((0.0, 0.0, 0.0, 0.0), (0.1, 0.1, 0.2, 0.2))(Tensor(ANCHORS), Tensor(GT)))
    pw, ph = ANCHORS[:, 2] - ANCHORS[:, 0] + 1, ANCHORS[:, 3] - ANCHORS[:, 1] + 1
    gw, gh = GT[:, 2] - GT[:, 0] + 1, GT[:, 3] - GT[:, 1] + 1
    dx = ((GT[:, 0] + GT[:, 2]) - (ANCHORS[:, 0] + ANCHORS[:, 2])) * 0.5 / pw
    dy = ((GT[:, 1] + GT[:, 3]) - (ANCHORS[:, 1] + ANCHORS[:, 3])) * 0.5 / ph
    want = np.stack([dx / 0.1, dy / 0.1, np.log(gw / pw) / 0.2, np.log(gh / ph) / 0.2], -1)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    with pytest.raises(ValueError, match="stds must not contain 0"):
        P.BoundingBoxEncode(stds=(1, 1, 0, 1))


def test_trace_v2_and_solve_triangular():
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_allclose(np.asarray(P.TraceV2()(Tensor(x), 1, -2, -1)), np.trace(x, 1, -2, -1))
    np.testing.assert_allclose(np.asarray(P.TraceV2()(Tensor(x))), np.trace(x, 0, 1, 0))
    a = np.tril(np.random.default_rng(0).uniform(1, 2, (2, 4, 4))).astype(np.float32)
    b = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = np.asarray(P.SolveTriangular()(Tensor(a), Tensor(b), 1, True, False))
    want = np.stack([scipy.linalg.solve_triangular(a[i], b[i], trans=1, lower=True) for i in range(2)])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_solve_triangular_splits_the_batch_only():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    a = np.tile(np.eye(4, dtype=np.float32) * 2, (8, 1, 1))
    b = np.ones((8, 4), np.float32)
    net = sharded(P.SolveTriangular(), ((8, 1, 1), (8, 1)), 0, True)
    assert kind_strategies(net, Tensor(a), Tensor(b), kind="SolveTriangular") == [[[8, 1, 1], [8, 1]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(a), Tensor(b))), b / 2)
    with pytest.raises(StrategyError, match="SolveTriangular cannot split a dim 1"):
        kind_strategies(sharded(P.SolveTriangular(), ((4, 2, 1), (4, 1)), 0, True), Tensor(a), Tensor(b),
                  kind="SolveTriangular")


def test_bounding_box_encode_splits_boxes_alike_but_not_coordinates():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = sharded(P.BoundingBoxEncode(), ((8, 1), (8, 1)))
    assert kind_strategies(net, Tensor(ANCHORS), Tensor(GT), kind="BoundingBoxEncode") == [[[8, 1], [8, 1]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(ANCHORS), Tensor(GT))),
                               np.asarray(P.BoundingBoxEncode()(Tensor(ANCHORS), Tensor(GT))), rtol=1e-6)
    with pytest.raises(StrategyError, match="split alike"):
        kind_strategies(sharded(P.BoundingBoxEncode(), ((8, 1), (4, 1))), Tensor(ANCHORS), Tensor(GT),
                  kind="BoundingBoxEncode")


@pytest.mark.parametrize("driver", [None, "gelsd"])
def test_lstsq_v2_solution_residuals_rank_and_singular_values(driver, notices):
    a = np.random.default_rng(1).standard_normal((2, 5, 3)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((2, 5, 2)).astype(np.float32)
    solution, residuals, rank, singular = P.LstsqV2()(Tensor(a), Tensor(b), driver)
    want = [np.linalg.lstsq(a[i], b[i], rcond=None) for i in range(2)]
    np.testing.assert_allclose(np.asarray(solution), np.stack([w[0] for w in want]), rtol=1e-4, atol=1e-5)
    assert np.asarray(rank).tolist() == [3, 3]
    if driver is None:  # gelsy: neither residuals nor singular values
        assert np.asarray(residuals).shape == (0,) and np.asarray(singular).shape == (0,)
    else:
        np.testing.assert_allclose(np.asarray(residuals), np.stack([w[1] for w in want]), rtol=1e-4)
        np.testing.assert_allclose(np.asarray(singular), np.stack([w[3] for w in want]), rtol=1e-4)
        assert "residuals are returned for every A" in notices.text


def test_lstsq_v2_splits_the_batch_only():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    a = np.tile(np.eye(4, 2, dtype=np.float32), (8, 1, 1))
    b = np.ones((8, 4), np.float32)
    net = sharded(P.LstsqV2(), ((8, 1, 1), (8, 1)), "gelsd")
    assert kind_strategies(net, Tensor(a), Tensor(b), kind="LstsqV2") == [[[8, 1, 1], [8, 1]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(a), Tensor(b))[0]), np.ones((8, 2)), atol=1e-5)
    with pytest.raises(StrategyError, match="LstsqV2 cannot split A dim 1"):
        kind_strategies(sharded(P.LstsqV2(), ((2, 2, 1), (2, 1))), Tensor(a), Tensor(b), kind="LstsqV2")
