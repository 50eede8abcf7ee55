"""``Cell.parameter_layout_dict`` after ``_cell_graph_executor.compile``: each Parameter's layout as MindSpore's
unit tests read it (``[device_arrangement, tensor_map, slice_shape, field_size, uniform_split, opt_shard_group]``),
and ``_VirtualDatasetCell``, the wrapper those tests put around their networks."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.errors import ConfigError
from graphpar.nn.wrap.cell_wrapper import _VirtualDatasetCell
from graphpar.parallel import Layout


class Net(nn.Cell):
    def __init__(self, strategy1=((2, 1), (1, 4)), strategy2=((2, 4), (4, 1))):
        super().__init__()
        self.w1 = ms.Parameter(ms.initializer("normal", (16, 32)), name="w1")
        self.w2 = ms.Parameter(ms.initializer("normal", (32, 8)), name="w2")
        self.matmul1 = ops.MatMul().shard(strategy1)
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul().shard(strategy2)

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul1(x, self.w1)), self.w2)


def _x():
    return Tensor(np.ones((8, 16), np.float32))


def test_layouts_after_a_semi_auto_compile():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    net = Net()
    assert net.parameter_layout_dict == {}  # nothing compiled yet, as MindSpore's
    _cell_graph_executor.compile(net, _x())
    layouts = net.parameter_layout_dict
    # w1 split 4-way on its columns, w2 4-way on its rows; the 2-way batch split repeats both
    assert layouts["w1"] == ([2, 4], [-1, 0], [16, 8], 0, True, "")
    assert layouts["w2"] == ([2, 4], [0, -1], [8, 8], 0, True, "")
    # the data input is a graph parameter too (MindSpore's tuple holds it): whole on every rank with full_batch
    assert layouts["x"] == ([8], [-1, -1], [8, 16], 0, True, "")


def test_a_dimension_split_by_two_layout_axes_lists_both():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    layout = Layout((2, 2, 2), ("dp", "sp", "mp"))
    net = Net(strategy1=(layout("dp", ("sp", "mp")), layout(("sp", "mp"), "None")), strategy2=((2, 1), (1, 1)))
    _cell_graph_executor.compile(net, _x())
    device_matrix, tensor_map, slice_shape, *_ = net.parameter_layout_dict["w1"]
    assert slice_shape == [4, 32]  # 16 rows over sp x mp = 4 devices
    # graphpar's mesh merges neighbouring axes that split one dimension: sp x mp is one device-matrix entry of 4
    # (MindSpore prints the Layout's own matrix, [2, 2, 2] with the tensor map [1, 0, -1]; the slice is the same)
    assert device_matrix == [2, 4] and tensor_map == [0, -1]


def test_parallel_optimizer_names_the_sharding_group():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True,
                                 enable_parallel_optimizer=True,
                                 parallel_optimizer_config={"parallel_optimizer_threshold": 0})
    net = Net()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    _cell_graph_executor.compile(train, _x(), Tensor(np.ones((8, 8), np.float32)))
    layouts = train.parameter_layout_dict
    # w1 is split over the 4 model-parallel devices and repeated over the 2 data-parallel ones: the parallel
    # optimizer shards it over those 2 (ranks 0 and 4 hold rank 0's group)
    assert layouts["w1"][2] == [16, 8]
    assert layouts["w1"][5] == "2-0_4"
    net.w2.parallel_optimizer = False  # MindSpore's opt-out: the parameter stays whole in the optimizer
    _cell_graph_executor.compile(train, _x(), Tensor(np.ones((8, 8), np.float32)))
    assert train.parameter_layout_dict["w2"][5] == "" and train.parameter_layout_dict["w1"][5] == "2-0_4"


def test_empty_when_nothing_is_planned():
    net = Net()
    _cell_graph_executor.compile(net, _x())  # STAND_ALONE plans no op
    assert net.parameter_layout_dict == {}


def test_virtual_dataset_cell_is_the_network_as_the_dataset_feeds_it():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    wrapped = _VirtualDatasetCell(Net())
    assert [p.name for p in wrapped.trainable_params()] == ["w1", "w2"]  # auto_prefix=False, as MindSpore's
    _cell_graph_executor.compile(wrapped, _x())
    strategies = _cell_graph_executor._get_shard_strategy(wrapped)
    assert sorted(v for k, v in strategies.items() if "MatMul" in k) == [[[2, 1], [1, 4]], [[2, 4], [4, 1]]]
    assert wrapped.parameter_layout_dict["w1"][2] == [16, 8]
    with pytest.raises(ConfigError, match="repeat_dim_direct.*dataset_strategy"):
        wrapped._virtual_dataset.add_prim_attr("repeat_dim_direct", "right")


def test_allreduce_fusion_groups_are_refused_by_name():
    """MindSpore's ``_cell_graph_executor._get_allreduce_fusion`` reports the fusion group of each gradient
    AllReduce; graphpar has none (XLA combines the reductions), so it says so and where the collectives are."""
    from graphpar.common.api import NoFusionGroupsError, _cell_graph_executor

    with pytest.raises(NoFusionGroupsError, match=r"_get_allreduce_fusion\(Dense\): graphpar has no AllReduce "
                                                  r"fusion groups .*parse_collectives"):
        _cell_graph_executor._get_allreduce_fusion(nn.Dense(2, 2))
    assert issubclass(NoFusionGroupsError, NotImplementedError)
