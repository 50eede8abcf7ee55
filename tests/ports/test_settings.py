"""Settings a ported MindSpore script passes are honoured or said to have no effect, never dropped unseen."""

import logging

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import ParallelModeError
from graphpar.common.parameter import Parameter
from graphpar.models.megatron import QuickstartNet


def _planned_strategies(**ctx):
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", **ctx)
    net = QuickstartNet()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    x = np.ones((16, 32), np.float32)
    graph = train.program.planned([x, np.ones((16, 16), np.float32)]).graph
    return {name: graph.find(name)[0].strategy.in_strategy() for name in ("relu", "matmul2")}


@pytest.mark.parametrize("order", ["flag_first", "flag_last"])
def test_1x_sharding_propagation_flag_selects_propagation(order):
    """MindSpore 1.x's ``sharding_propagation=True`` propagates whatever ``search_mode`` says (its edge costs test
    ``search_mode == sharding_propagation || sharding_propagation()``); it was accepted and ignored."""
    ctx = ({"sharding_propagation": True, "search_mode": "dynamic_programming"} if order == "flag_first" else
           {"search_mode": "dynamic_programming", "sharding_propagation": True})
    got = _planned_strategies(**ctx)
    assert ms.get_auto_parallel_context("search_mode") == "sharding_propagation"
    # MindSpore's published propagation result for the quickstart (seed 004's step_parallel_begin excerpt)
    assert got == {"relu": ((2, 4),), "matmul2": ((2, 4), (4, 1))}


def test_sharding_propagation_flag_must_be_bool():
    with pytest.raises(ValueError, match="sharding_propagation must be a bool"):
        ms.set_auto_parallel_context(sharding_propagation="yes")


def test_loss_repeated_mean_says_what_happens_instead(notices):
    ms.set_auto_parallel_context(loss_repeated_mean=False)
    said = [r.getMessage() for r in notices.records if "loss_repeated_mean" in r.getMessage()]
    assert len(said) == 1 and "global batch" in said[0] and "XLA schedules" not in said[0], said
    assert all(r.levelno >= logging.INFO for r in notices.records)


class LayerwiseNet(nn.Cell):
    """Seed 003's DataParallelNet: a weight with ``layerwise_parallel=True``."""

    def __init__(self):
        super().__init__()
        self.weight = Parameter(ms.Tensor(np.full((16, 16), 0.1, np.float32)), name="fc_weight",
                                layerwise_parallel=True)
        self.relu = nn.ReLU()
        self.fc = ops.MatMul()

    def construct(self, inputs):
        return self.fc(self.relu(inputs), self.weight)


def test_layerwise_parallel_says_what_happens_instead(notices):
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    net = LayerwiseNet()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    train(np.ones((16, 16), np.float32), np.zeros((16, 16), np.float32))
    said = [r.getMessage() for r in notices.records if "layerwise_parallel" in r.getMessage()]
    assert len(said) == 1 and "fc_weight" in said[0] and "reduces their gradients" in said[0], said


def test_global_rank_says_it_picks_nothing(notices):
    ms.set_auto_parallel_context(global_rank=3)
    assert ms.get_auto_parallel_context("global_rank") == 3
    assert any("global_rank" in r.getMessage() and "picks nothing" in r.getMessage() for r in notices.records)


def _data_parallel_weights(**ctx):
    import graphpar.dataset as ds
    from graphpar.train import Model

    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="data_parallel", **ctx)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 32)).astype(np.float32), rng.normal(size=(8, 16)).astype(np.float32)
    data = ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(2)  # 2 rows: fewer than the 8 devices
    net = nn.Dense(32, 16, weight_init=ms.Tensor(rng.normal(0, 0.1, (16, 32)).astype(np.float32)), bias_init="zeros")
    Model(net, loss_fn=nn.MSELoss(), optimizer=nn.SGD(net.trainable_params(), 0.1)).train(
        1, data, dataset_sink_mode=False)
    return np.asarray(net.weight)


def test_full_batch_is_refused_outside_semi_auto_and_auto():
    """MindSpore's compile runs ``_check_full_batch``: ``full_batch=True`` in DATA_PARALLEL (or STAND_ALONE, or
    HYBRID) raises ``RuntimeError`` ("full_batch could only be used under semi_auto_parallel or auto_parallel");
    graphpar refuses it by name, a ``RuntimeError`` too. Without it DATA_PARALLEL trains each device's batch."""
    with pytest.raises(ParallelModeError, match=r"full_batch=True .* in parallel_mode='data_parallel': .* "
                                                r"'semi_auto_parallel' and 'auto_parallel' only"):
        _data_parallel_weights(full_batch=True)
    assert issubclass(ParallelModeError, RuntimeError)
    assert np.isfinite(_data_parallel_weights()).all()


def test_full_batch_in_stand_alone_is_said_to_change_nothing(notices):
    """MindSpore's compile refuses full_batch in STAND_ALONE too; graphpar's one device loads the whole batch either
    way, so it runs and says so once."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="stand_alone", full_batch=True)
    out = nn.Dense(4, 2, weight_init="ones", bias_init="zeros")(ms.Tensor(np.ones((3, 4), np.float32)))
    np.testing.assert_allclose(np.asarray(out), 4.0)
    said = [r.getMessage() for r in notices.records if "full_batch=True in parallel_mode='stand_alone'" in
            r.getMessage()]
    assert len(said) == 1, said
