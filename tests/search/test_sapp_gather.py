"""recursive_programming gives a Gather SAPP's strategy (MindSpore's ``PrepareGather``: from the Gather's own shapes,
whatever its neighbours); dynamic_programming searches it with the rest of the plan."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, context, nn
from graphpar.common.api import _cell_graph_executor
from graphpar.ir.graph import Node
from graphpar.ops import operations as P
from graphpar.planner.search.sapp import gather_strategy


def _gather(axis=0, batch_dims=0):
    return Node(id=0, kind="Gather", instance_name="gather", scope="", attrs={"batch_dims": batch_dims}, hint=None,
                out_hint=None, inputs=[], outputs=[], eqn=None, is_op=True, static_args={2: axis})


@pytest.mark.parametrize("table, indices, out, expected", [
    # the indices' dimension 0 is halved first, then the table's: "batch and axis" (4 * 2 == 8) keeps both
    ((1024, 128), (2, 1024), (2, 1024, 128), ((4, 1), (2, 1))),
    # the indices take every device
    ((64, 64), (64, 64), (64, 64, 64), ((1, 1), (8, 1))),
    # a 1-D table split beside split indices is a SHARD_AXIS_0 mode: the table's split is dropped
    ((128,), (4,), (4,), ((1,), (4,))),
    # indices that cannot be halved: the table's rows take the devices
    ((1024, 16), (3, 5), (3, 5, 16), ((8, 1), (1, 1))),
])
def test_axis0_rule(table, indices, out, expected):
    assert gather_strategy(_gather(0), [table, indices], [out], 8) == expected


def test_axis1_rule_splits_the_output_from_dimension_0_then_the_largest():
    # output (32, 4, 64): dimension 0 halved to 8 devices; the table keeps its gathered axis whole
    assert gather_strategy(_gather(1), [(32, 100), (4, 64)], [(32, 4, 64)], 8) == ((8, 1), (1, 1))
    # output (2, 4, 64): dimension 0 gives 2, then the largest (64) the remaining 4
    assert gather_strategy(_gather(1), [(2, 100), (4, 64)], [(2, 4, 64)], 8) == ((2, 1), (1, 4))


def test_no_sapp_rule_for_other_axes():
    assert gather_strategy(_gather(2), [(4, 8, 16), (2,)], [(4, 8, 2)], 8) is None


class GatherNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.gather = P.Gather()
        self.reshape = P.Reshape()
        self.matmul = P.MatMul()
        self.index = Tensor(np.ones([2, 1024]), dtype=ms.int32)

    def construct(self, x, y):
        return self.matmul(self.reshape(self.gather(x, self.index, 0), (128, 2048)), y)


def _gather_strategy(search_mode):
    context.set_auto_parallel_context(dataset_strategy="full_batch", device_num=8, parallel_mode="auto_parallel",
                                      search_mode=search_mode)
    net = GatherNet()
    net.set_train()
    _cell_graph_executor.compile(net, Tensor(np.ones([1024, 128]), ms.float32),
                                 Tensor(np.ones([2048, 64]), ms.float32), phase="train")
    found = _cell_graph_executor._get_shard_strategy(net)
    return next(v for k, v in found.items() if "Gather-op" in k)


def test_recursive_programming_gives_the_gather_sapps_strategy():
    assert _gather_strategy("recursive_programming") == [[4, 1], [2, 1]]


def test_dynamic_programming_searches_the_gather():
    # graphpar's exact search prefers the table's columns (no reduction of a table split on its gathered axis)
    assert _gather_strategy("dynamic_programming") == [[1, 4], [2, 1]]
