"""Compile-only plans for more devices than this process has, as MindSpore's unit tests make them
(``set_auto_parallel_context(device_num=24)`` then ``_cell_graph_executor.compile``): the strategies, parameter
layouts and begin dump are those of a 24-device job, said once; running the network still needs the devices, and
strategies whose device matrices cannot share one mesh fail the compile as MindSpore's do (a ``RuntimeError``)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, context, nn
from graphpar.common.api import _cell_graph_executor
from graphpar.errors import DeviceError
from graphpar.ops import operations as P


class Net(nn.Cell):
    def __init__(self, mul_strategy, relu_strategy):
        super().__init__()
        self.mul = P.Mul().shard(mul_strategy)
        self.relu = P.ReLU().shard(relu_strategy)
        self.w = Parameter(Tensor(np.ones([48, 24]), dtype=ms.float32), "w")

    def construct(self, x):
        return self.relu(self.mul(x, self.w))


_x = Tensor(np.ones([48, 24]), dtype=ms.float32)


@pytest.fixture
def dumps(tmp_path):
    context.set_context(save_graphs=True, save_graphs_path=str(tmp_path))
    yield tmp_path
    context.set_context(save_graphs=False)


def test_compile_for_24_devices_without_them(dumps, notices):
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=24, dataset_strategy="full_batch")
    net = Net(((3, 8), (3, 8)), ((3, 8),))
    _cell_graph_executor.compile(net, _x)
    assert _cell_graph_executor._get_shard_strategy(net) == {"Default/Mul-op0": [[3, 8], [3, 8]],
                                                             "Default/ReLU-op0": [[3, 8]]}
    # w (48, 24) split 3 x 8 over the 24 ranks: each holds a (16, 3) slice
    assert net.parameter_layout_dict["w"][:3] == ([3, 8], [1, 0], [16, 3])  # a tuple, as MindSpore's
    begin = list(dumps.glob("rank_0/step_parallel_begin_*.ir"))
    assert len(begin) == 1 and "# rank: 0 of 24" in begin[0].read_text()
    said = [r.getMessage() for r in notices.records if "without those devices" in r.getMessage()]
    assert len(said) == 1 and "device_num=24" in said[0] and "this process has 8" in said[0]
    _cell_graph_executor.compile(Net(((3, 8), (3, 8)), ((3, 8),)), _x)
    assert sum("without those devices" in r.getMessage() for r in notices.records) == 1  # once


def test_running_on_absent_devices_is_refused():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=24, dataset_strategy="full_batch")
    net = Net(((3, 8), (3, 8)), ((3, 8),))
    with pytest.raises(DeviceError, match=r"device_num=24\): this job has only 8"):
        net(_x)


def test_strategies_whose_meshes_do_not_nest_fail_the_compile():
    """3 x 8 then 8 x 3 on 24 devices: no one mesh refines both (MindSpore: a RuntimeError at compile)."""
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=24, dataset_strategy="full_batch")
    with pytest.raises(RuntimeError, match="groupings 3 and 8 do not nest") as info:
        _cell_graph_executor.compile(Net(((3, 8), (3, 8)), ((8, 3),)), _x)
    assert isinstance(info.value, DeviceError)
