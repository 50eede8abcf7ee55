"""MindSpore's strategy semantics: CheckStrategy's refusals, () for scalar operands, Reshape following its input,
Gather's batch default, and the cost model's prediction against the compiled HLO for small networks."""

import logging

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.errors import StrategyError

from .collective_bytes import predicted_and_measured
from .helpers import collectives, forward, megatron, quickstart_net, rand, reference, strategies


class TwoInputs(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, a, b):
        return self.op(a, b)


@pytest.mark.parametrize("op,shapes,words", [
    # x's contracted dim split 1, w's split 4: MindSpore refuses ("Invalid strategy"); never rewritten to (2, 4)
    (lambda: ops.MatMul().shard(((2, 1), (4, 1))), [(16, 64), (64, 16)],
     ["'op'", "Default/network-TwoInputs", "((2, 1), (4, 1))", "(16, 64)", "(64, 16)", "split 4", "split 1",
      "e.g. ((2, 1), (1, 1))"]),
    # shared dims of an elementwise op split differently (a 1 is a split too)
    (lambda: ops.Mul().shard(((1, 1), (1, 8))), [(16, 64), (16, 64)],
     ["'op'", "((1, 1), (1, 8))", "(16, 64)", "split 8", "split 1", "e.g. ((1, 1), (1, 1))"]),
])
def test_inconsistent_strategies_are_errors(op, shapes, words):
    with pytest.raises(StrategyError) as err:
        forward(TwoInputs(op()), *[rand(*s) for s in shapes])
    text = str(err.value)
    assert all(w in text for w in words), text


class ScaledAttentionScore(nn.Cell):
    """MindSpore's transformer: ``Mul().shard(((dp, mp, 1, 1), ()))`` multiplies by a Python float."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(rand(4, 8, 8, seed=1) * 0.1), "w")
        self.batch_matmul = ops.BatchMatMul().shard(((2, 4, 1, 1), (4, 1, 1)))
        self.mul = ops.Mul().shard(((2, 4, 1, 1), ()))

    def construct(self, x):
        return self.mul(self.batch_matmul(x, self.w), 0.125)


def test_scalar_operand_takes_empty_strategy_and_trains():
    x, y = rand(4, 4, 8, 8), rand(4, 4, 8, 8, seed=3)
    losses = {}
    for mode in ("stand_alone", "semi_auto_parallel"):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode)
        net = ScaledAttentionScore()
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.5, 0.9))
        losses[mode] = [float(train(x, y)) for _ in range(4)]
        if mode != "stand_alone":
            graph = train.program.plan_graph([x, y])
            assert graph.find("mul")[0].strategy.in_strategy() == ((2, 4, 1, 1),)
    np.testing.assert_allclose(losses["semi_auto_parallel"], losses["stand_alone"], rtol=1e-5)
    assert losses["stand_alone"][-1] < losses["stand_alone"][0]


def test_scalar_entry_must_be_empty():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.mul = ops.Mul().shard(((8, 1), (1,)))

        def construct(self, x):
            return self.mul(x, 2.0)

    with pytest.raises(StrategyError, match=r"'mul'.*\(\(8, 1\), \(1,\)\).*y has rank 0.*e\.g\. \(\)"):
        forward(Net(), rand(16, 4))


class ReshapeNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.relu = ops.ReLU().shard(((2, 4, 1),))
        self.reshape = ops.Reshape().shard(((8, 1, 1),))  # ignored, as MindSpore ignores it
        self.relu2 = ops.ReLU()

    def construct(self, x):
        return self.relu2(self.reshape(self.relu(x), (16, 64)))


def test_reshape_takes_its_layout_from_its_input(caplog):
    with caplog.at_level(logging.WARNING, logger="graphpar"):
        out, hlo, graph = forward(ReshapeNet(), rand(8, 8, 16), mode="auto_parallel",
                                  search_mode="sharding_propagation", full_batch=True)
    reshape = graph.find("reshape")[0]
    # (8, 8, 16) split (2, 4, 1) -> (16, 64): the 8 rows of dim 0 split 2 carry to the merged dim 0 (its minor dim
    # is split too but dim 0 is not split completely, so only dim 0's split rides along)
    assert reshape.strategy.output_spec(0) == (("m0",), ())
    assert reshape.provenance.kind == "propagated"
    assert any("Reshape takes its layout from its input" in r.getMessage() and "((8, 1, 1))" in r.getMessage()
               for r in caplog.records)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(ReshapeNet(), rand(8, 8, 16))), rtol=1e-6)


def test_reshape_into_heads_carries_the_split_without_collectives():
    class Heads(nn.Cell):
        def __init__(self):
            super().__init__()
            self.relu = ops.ReLU().shard(((2, 4),))
            self.reshape = ops.Reshape()
            self.relu2 = ops.ReLU().shard(((2, 1, 4, 1),))

        def construct(self, x):
            return self.relu2(self.reshape(self.relu(x), (4, 16, 4, 16)))

    out, hlo, graph = forward(Heads(), rand(64, 64), full_batch=True)
    assert graph.find("reshape")[0].strategy.output_spec(0) == (("m0",), (), ("m1", "m2"), ())
    assert sum(collectives(hlo).values()) == 0, collectives(hlo)


def test_gather_default_splits_the_indices_batch():
    class Embed(nn.Cell):
        def __init__(self):
            super().__init__()
            self.table = Parameter(Tensor(rand(32, 16)), "table")
            self.gather = ops.Gather()
            self.matmul = ops.MatMul().shard(((8, 1), (1, 1)))
            self.w = Parameter(Tensor(rand(16, 16)), "w")

        def construct(self, ids):
            return self.matmul(ops.Reshape()(self.gather(self.table, ids, 0), (64, 16)), self.w)

    ids = np.random.default_rng(0).integers(0, 32, (8, 8)).astype(np.int32)
    _, _, graph = forward(Embed(), ids)
    assert strategies(graph)["gather"] == ((1, 1), (8, 1))


@pytest.mark.parametrize("name,make,x,y,ctx", [
    ("quickstart", quickstart_net, (16, 32), (16, 16),
     dict(parallel_mode="auto_parallel", search_mode="sharding_propagation")),
    ("megatron mlp", lambda: megatron(2), (32, 64), (32, 64), dict(parallel_mode="semi_auto_parallel")),
])
def test_predicted_collective_bytes_match_the_compiled_step(name, make, x, y, ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(**ctx)
    net = make()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    predicted, measured = predicted_and_measured(train, [rand(*x), rand(*y, seed=3)])
    assert measured > 0 and abs(predicted - measured) <= 0.1 * measured, (name, predicted, measured)


@pytest.mark.slow
@pytest.mark.parametrize("sync_bn", [False, True])
def test_resnet18_data_parallel_prediction(sync_bn):
    from graphpar.models import resnet18

    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    net = resnet18(class_num=10, width=0.125, sync_bn=sync_bn)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 16).astype(np.int32)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    predicted, measured = predicted_and_measured(train, [x, y])
    assert measured > 0 and abs(predicted - measured) <= 0.1 * measured, (predicted, measured)


def test_each_inserted_redistribution_is_reported_once(caplog):
    with caplog.at_level(logging.INFO, logger="graphpar"):
        _, _, graph = forward(quickstart_net(((2, 1), (1, 4))), rand(16, 32))
        forward(quickstart_net(((2, 1), (1, 4))), rand(16, 32))
    # matmul's output (2, 4)-split feeds relu's data-parallel (8, 1) input: an AllToAll-like move, priced. SEMI_AUTO
    # with the user's strategy: INFO (MindSpore logs inserted redistributions at DEBUG, warns only in propagation)
    found = [r for r in caplog.records if "redistribution inserted at edge 'matmul' -> 'relu'" in r.getMessage()]
    lines = [r.getMessage() for r in found]
    assert len(lines) == 1, lines
    assert found[0].levelno == logging.INFO
    assert "from (m0, m1.m2) to (m0.m1.m2, -)" in lines[0] and "B per device per step" in lines[0]
    records = graph.plan.redistributions
    relu = graph.find("relu")[0]
    assert any(r["node"] == relu.id and r["bytes"] > 0 for r in records)
