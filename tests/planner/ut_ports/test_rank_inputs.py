"""What shapes ``_cell_graph_executor.compile`` reads, as MindSpore's compile reads a graph's arguments in
SEMI_AUTO / AUTO_PARALLEL (``ToFullShape``, step_parallel_utils.cc): each argument is ONE RANK's part. Without
``full_batch`` (``dataset_strategy="data_parallel"``, the default) dimension 0 is multiplied by the ranks of a
pipeline stage; a ``dataset_strategy`` tuple multiplies each dimension by its split; with ``full_batch`` the shape is
the whole input. graphpar's own calls (``net(x)``, ``Model.train``, ``graphpar.parallel.strategies(net, x)``) take
the process's data, the whole batch in a one-process job."""

import re

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, context, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.ir.construct_errors import OpShapeError


class Net(nn.Cell):
    """x * w, w a [64, 16] Parameter: x's global shape must be [64, 16]."""

    def __init__(self, strategy=((8, 1), (8, 1))):
        super().__init__()
        self.mul = ops.Mul().shard(strategy)
        self.w = Parameter(Tensor(np.ones((64, 16), np.float32)), "w")

    def construct(self, x):
        return self.mul(x, self.w)


def _x(rows, cols=16):
    return Tensor(np.ones((rows, cols), np.float32))


def _mul(strategies):
    return next(v for k, v in strategies.items() if re.search("Mul-op", k))


def test_data_parallel_compile_takes_one_ranks_rows():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    net = Net()
    _cell_graph_executor.compile(net, _x(8))  # rank 0's 8 rows of 64
    assert _mul(_cell_graph_executor._get_shard_strategy(net)) == [[8, 1], [8, 1]]
    with pytest.raises(OpShapeError, match=r"x\[512, 16\], y\[64, 16\]"):  # 64 rows per rank: 512 in all
        _cell_graph_executor.compile(Net(), _x(64))


def test_the_ranks_of_one_pipeline_stage_stack_their_rows():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=16, global_rank=0,
                                      pipeline_stages=2)
    with pytest.raises(OpShapeError, match=r"x\[128, 16\]"):  # 8 ranks per stage, 16 rows each
        _cell_graph_executor.compile(Net(), _x(16))


def test_a_dataset_strategy_multiplies_each_dimension_by_its_split():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0,
                                      dataset_strategy=((4, 2),))
    net = Net(((4, 2), (4, 2)))
    _cell_graph_executor.compile(net, _x(16, 8))  # rank 0's block: 64 / 4 rows, 16 / 2 columns
    assert _mul(_cell_graph_executor._get_shard_strategy(net)) == [[4, 2], [4, 2]]


def test_full_batch_compile_takes_the_whole_batch():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0,
                                      dataset_strategy="full_batch")
    net = Net()
    _cell_graph_executor.compile(net, _x(64))
    assert _mul(_cell_graph_executor._get_shard_strategy(net)) == [[8, 1], [8, 1]]


def test_graphpars_own_calls_take_the_process_data():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    assert _mul(ms.parallel.strategies(Net(), _x(64))) == [[8, 1], [8, 1]]
    assert Net()(_x(64)).shape == (64, 16)
