"""``Model.predict`` takes this rank's batch in parallel modes, as MindSpore does (graphpar/train/predict_batch.py):
a batch-1 predict under batch-splitting strategies runs and gives stand-alone's output (the network in numpy); with ``full_batch`` the
data is the global batch."""

import numpy as np

import graphpar as ms
from tests.checkpoint.helpers import params
from tests.ports.scripts.rank_dirs_port import Network, numpy_forward

X = np.random.default_rng(5).normal(size=(3, 8, 8)).astype(np.float32)


def _net(layer1=((8, 1), (1, 1)), layer3=((2, 2), (2, 1))):  # default: layer1 data parallel, the batch split 8 ways
    ms.set_seed(1)
    net = Network()
    net.layer1.matmul.shard(layer1)
    net.layer3.matmul.shard(layer3)
    return net


def test_batch_one_predict_is_this_ranks_batch_and_equals_stand_alone():
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    net = _net()
    model = ms.Model(net)
    for x in (X[:1], X):  # one row, and three: each of the 8 ranks gets them (a global batch of 8 or 24 rows)
        out = model.predict(ms.Tensor(x))
        assert out.shape == (len(x), 10)
        np.testing.assert_allclose(np.asarray(out), numpy_forward(params(net), x), rtol=1e-5, atol=1e-5)
    layout = model.infer_predict_layout(ms.Tensor(X[:1]))  # planned for the same global batch as predict
    assert layout["layer3.weight"][0] == [2, 2, 2]
    assert sorted(params(net)) == sorted(layout)


def test_full_batch_predict_takes_the_global_batch():
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, dataset_strategy="full_batch")
    net = _net()
    x = np.concatenate([X, X, X[:2]])  # 8 rows: the global batch, split 8 ways by layer1
    out = ms.Model(net).predict(ms.Tensor(x))
    assert out.shape == (8, 10)
    np.testing.assert_allclose(np.asarray(out), numpy_forward(params(net), x), rtol=1e-5, atol=1e-5)


def test_a_tuple_dataset_strategy_makes_the_given_input_one_block_of_the_global_input():
    # ((1, 2, 1),): each rank's input is half of the global (1, 8, 8) along dimension 1; every rank gets this block
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, dataset_strategy=((1, 2, 1),))
    net = _net(((1, 1), (1, 8)), ((1, 2), (2, 1)))
    block = X[:1, :4]
    out = ms.Model(net).predict(ms.Tensor(block))
    np.testing.assert_allclose(np.asarray(out), numpy_forward(params(net), np.tile(block, (1, 2, 1))),
                               rtol=1e-5, atol=1e-5)
    # ((2, 1, 1),): the batch split 2 ways; the rank's rows come back
    ms.set_auto_parallel_context(dataset_strategy=((2, 1, 1),))
    net = _net(((2, 1), (1, 4)))
    out = ms.Model(net).predict(ms.Tensor(X[:1]))
    assert out.shape == (1, 10)
    np.testing.assert_allclose(np.asarray(out), numpy_forward(params(net), X[:1]), rtol=1e-5, atol=1e-5)
