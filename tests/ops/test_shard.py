"""ops.*.shard(): structure is validated when the strategy is given, ranks when the network is traced."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.errors import StrategyError


def test_shard_returns_the_op_and_records_the_strategy():
    op = ops.MatMul().shard(((2, 4), (4, 1)))
    assert isinstance(op, ops.MatMul) and op.in_strategy == ((2, 4), (4, 1))
    assert ops.ReLU().shard(((8, 1),)).in_strategy == ((8, 1),)


def test_non_tuple_strategy():
    with pytest.raises(StrategyError) as err:
        ops.MatMul().shard([[2, 4], [4, 1]])
    assert "tuple" in str(err.value) and "MatMul" in str(err.value) and "((2, 4), (4, 1))" in str(err.value)


def test_wrong_nesting():
    with pytest.raises(StrategyError, match=r"in_strategy\[0\] must be a tuple"):
        ops.MatMul().shard((2, 4))


@pytest.mark.parametrize("split", [0, -2])
def test_zero_or_negative_split(split):
    with pytest.raises(StrategyError, match=f"split {split}"):
        ops.MatMul().shard(((2, split), (4, 1)))


def test_strategy_length_differs_from_input_count():
    with pytest.raises(StrategyError) as err:
        ops.MatMul().shard(((2, 4),))
    assert "2 tensor input(s)" in str(err.value) and "has 1 entry" in str(err.value)


def test_rank_mismatch_is_found_at_trace_time_with_scope():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.ones((4, 4), np.float32)), "w")
            self.matmul = ops.MatMul().shard(((2, 4, 1), (4, 1)))

        def construct(self, x):
            return self.matmul(x, self.w)

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    net = Net()
    with pytest.raises(StrategyError) as err:
        nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params()))(
            np.ones((8, 4), np.float32), np.ones((8, 4), np.float32))
    text = str(err.value)
    assert "'matmul'" in text and "_backbone-Net" in text and "rank 2" in text


def test_strategy_ignored_once_in_stand_alone(caplog):
    import logging

    from graphpar import _logging

    _logging._said.discard("ignored-strategies:stand_alone")

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(4, 2)
            self.dense.matmul.shard(((2, 1), (4, 1)))

        def construct(self, x):
            return self.dense(x)

    net = Net()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params()))
    logger = logging.getLogger("graphpar")
    logger.propagate = True
    with caplog.at_level(logging.WARNING, logger="graphpar"):
        for _ in range(3):
            train(np.ones((8, 4), np.float32), np.ones((8, 2), np.float32))
    said = [r.message for r in caplog.records if "accepted and ignored" in r.message]
    assert len(said) == 1 and "dense.matmul" in said[0]
