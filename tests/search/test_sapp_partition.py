"""recursive_programming under MindSpore's ``MS_INTERFERED_SAPP=1``: the ``shard()`` strategies are kept and SAPP
partitions the MatMuls around them (``planner.search.sapp_partition``: one 2-part cut per halving of the devices,
each MatMul's cut priced by SAPP's cost and a 16x-size penalty on every edge whose cut differs from its
neighbour's). Without the variable the MatMuls are searched. Also SAPP's RmsNorm rule (``planner.search.sapp``)."""

import logging

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, context, nn
from graphpar.common.api import _cell_graph_executor
from graphpar.ops import operations as P
from graphpar.planner.search.sapp import rms_norm_strategy
from graphpar.planner.search.sapp_partition import decompose


def test_a_user_split_is_one_halving_per_cut_n_c_h_w_in_order():
    # (2, 4) on a 2-D tensor: h once, then w twice (MindSpore's DecomposeStrategy)
    assert decompose((2, 4)) == [(1, 1, 0.5, 1), (1, 1, 1, 0.5), (1, 1, 1, 0.5)]
    assert decompose((1, 8)) == [(1, 1, 1, 0.5)] * 3
    assert decompose((1, 1)) == []


def test_rms_norm_rule_splits_x_on_dimension_0_only():
    assert rms_norm_strategy([(8, 320), (320,)], 8) == ((8, 1), (1,))
    assert rms_norm_strategy([(4, 16, 32), (32,)], 8) == ((4, 1, 1), (1,))  # no more than dimension 0 holds
    assert rms_norm_strategy([(16, 32), (16, 32)], 8) == ((8, 1), (8, 1))  # gamma as x's trailing dimensions


class TwoMatMul(nn.Cell):
    """MindSpore's test_auto_parallel_sapp_custom_strategy network: the first MatMul's weight split on its columns."""

    def __init__(self):
        super().__init__()
        self.matmul1 = P.MatMul().shard(((1, 1), (1, 8)))
        self.matmul2 = P.MatMul()
        self.y = Parameter(Tensor(np.full([64, 64], 0.01), ms.float32), "y")
        self.z = Parameter(Tensor(np.full([64, 64], 0.01), ms.float32), "z")

    def construct(self, x):
        return self.matmul2(self.matmul1(x, self.y), self.z)


def _strategies(monkeypatch, interfered, search_mode="recursive_programming"):
    if interfered is None:
        monkeypatch.delenv("MS_INTERFERED_SAPP", raising=False)
    else:
        monkeypatch.setenv("MS_INTERFERED_SAPP", interfered)
    context.set_auto_parallel_context(dataset_strategy="full_batch", device_num=8, parallel_mode="auto_parallel",
                                      search_mode=search_mode)
    net = TwoMatMul()
    net.set_train()
    _cell_graph_executor.compile(net, Tensor(np.ones([1024, 64]), ms.float32), phase="train")
    return _cell_graph_executor._get_shard_strategy(net)


def test_interfered_sapp_cuts_the_next_matmul_to_match_the_users_split(monkeypatch):
    found = _strategies(monkeypatch, "1")
    # the hint is kept; its output is split on the columns, so SAPP cuts the second MatMul's K three times
    # (cutting its rows would pay 16x its input's size at each cut)
    assert found["Default/MatMul-op1"] == [[1, 1], [1, 8]]
    assert found["Default/MatMul-op0"] == [[1, 8], [8, 1]]


@pytest.mark.parametrize("value, search_mode", [(None, "recursive_programming"), ("0", "recursive_programming"),
                                                ("1", "dynamic_programming")])
def test_without_interfered_sapp_the_matmul_is_searched(monkeypatch, value, search_mode):
    # MindSpore reads only "1"; dynamic_programming never reads it. graphpar's search redistributes the
    # column-split input (an AlltoAll) rather than reduce a K-split product
    found = _strategies(monkeypatch, value, search_mode)
    assert found["Default/MatMul-op1"] == [[1, 1], [1, 8]]
    assert found["Default/MatMul-op0"] == [[8, 1], [1, 1]]


class MatMulRmsNorm(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul = P.MatMul()
        self.rms_norm = P.RmsNorm()
        self.w = Parameter(Tensor(np.full([32, 256], 0.01), ms.float32), "w")
        self.gamma = Parameter(Tensor(np.ones([256]), ms.float32), "gamma")

    def construct(self, x):
        out, _ = self.rms_norm(self.matmul(x, self.w), self.gamma)
        return out


@pytest.mark.parametrize("search_mode, expected", [("recursive_programming", [[8, 1], [1]]),
                                                   ("dynamic_programming", [[1, 8], [8]])])
def test_rms_norm_takes_sapps_strategy_under_recursive_programming(search_mode, expected):
    context.set_auto_parallel_context(dataset_strategy="full_batch", device_num=8, parallel_mode="auto_parallel",
                                      search_mode=search_mode)
    net = MatMulRmsNorm()
    net.set_train()
    _cell_graph_executor.compile(net, Tensor(np.ones([8, 32]), ms.float32), phase="train")
    found = _cell_graph_executor._get_shard_strategy(net)
    assert found["Default/RmsNorm-op0"] == expected


def _forward_collectives(monkeypatch, interfered):
    if interfered:
        monkeypatch.setenv("MS_INTERFERED_SAPP", "1")
    else:
        monkeypatch.delenv("MS_INTERFERED_SAPP", raising=False)
    context.set_auto_parallel_context(dataset_strategy="full_batch", device_num=8, parallel_mode="auto_parallel",
                                      search_mode="recursive_programming")
    net = TwoMatMul()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    x, label = Tensor(np.ones([1024, 64]), ms.float32), Tensor(np.ones([1024, 64]), ms.float32)
    rows = ms.parallel.plan(train, x, label).collectives(0)
    return sorted((r["kind"], r["bytes"]) for r in rows if r["op"] == "matmul2" and r["pass"] == "forward")


def test_the_compiled_step_runs_sapps_k_cut(monkeypatch):
    # SAPP's plan: the second MatMul's product summed over the 8 devices (its whole 1024 x 64 output, f32);
    # graphpar's search instead moves the column-split input to rows (an AlltoAll of its 1/8 slice)
    assert _forward_collectives(monkeypatch, True) == [("AllReduce", 1024 * 64 * 4)]
    assert _forward_collectives(monkeypatch, False) == [("AlltoAll", 1024 * 64 * 4 // 8)]


class SixWay(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul1 = P.MatMul().shard(((1, 1), (1, 6)))
        self.matmul2 = P.MatMul()
        self.y = Parameter(Tensor(np.full([48, 96], 0.01), ms.float32), "y")
        self.z = Parameter(Tensor(np.full([96, 48], 0.01), ms.float32), "z")

    def construct(self, x):
        return self.matmul2(self.matmul1(x, self.y), self.z)


def test_interfered_sapp_needs_a_power_of_two_and_says_so(monkeypatch, caplog):
    # SAPP's cuts halve the devices; on 6 the MatMuls are searched as without the variable, said once
    monkeypatch.setenv("MS_INTERFERED_SAPP", "1")
    context.set_auto_parallel_context(dataset_strategy="full_batch", device_num=6, parallel_mode="auto_parallel",
                                      search_mode="recursive_programming")
    net = SixWay()
    net.set_train()
    with caplog.at_level(logging.WARNING, logger="graphpar"):
        _cell_graph_executor.compile(net, Tensor(np.ones([1536, 48]), ms.float32), phase="train")
    assert any("MS_INTERFERED_SAPP" in r.getMessage() and "power of two" in r.getMessage() for r in caplog.records)
    found = _cell_graph_executor._get_shard_strategy(net)
    assert found["Default/MatMul-op1"] == [[1, 1], [1, 6]]
    assert found["Default/MatMul-op0"] == [[6, 1], [1, 1]]  # the search's plan, not SAPP's K cut
