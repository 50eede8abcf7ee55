"""MindSpore's ``step_auto_parallel_begin_NNNN.ir``: with ``save_graphs``, an AUTO_PARALLEL compile also writes the
graph its strategy search starts from in MindSpore's IR form, each node named by the ``construct`` variable it is
assigned to (``%7(out1) = PrimFunc_MatMul(...)``), its ``shard()`` attributes as MindSpore prints them. MindSpore's
tests grep it (test_auto_parallel_out_strategy_propagation's save_and_load5/6); graphpar's own reader keeps reading
``step_parallel_begin``."""

import subprocess

import numpy as np

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.dump.loading import load
from graphpar.parallel.shard import Layout


class Net(nn.Cell):
    def __init__(self, in_layout=None, out_layout=None):
        super().__init__()
        self.add = ops.Add()
        self.matmul1 = ops.MatMul()
        if in_layout is not None:
            self.matmul1 = self.matmul1.shard(in_strategy=in_layout, out_strategy=out_layout)
        self.relu = ops.ReLU()
        self.w1 = Parameter(Tensor(np.ones((32, 8), np.float32)), "w1")

    def construct(self, x, b):
        out = self.add(x, b)
        out1 = self.matmul1(out, self.w1)
        return self.relu(self.relu(out1))  # a result no variable names, and a nested call


def _compile(tmp_path, mode, net):
    ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path))
    ms.set_auto_parallel_context(parallel_mode=mode, device_num=8, search_mode="sharding_propagation")
    x = Tensor(np.ones((64, 32), np.float32))
    _cell_graph_executor.compile(net, x, x)
    return sorted(p.name for p in (tmp_path / "rank_0").iterdir())


def test_auto_parallel_writes_mindspores_begin_form_with_the_variable_names(tmp_path):
    layout = Layout((2, 2, 2), ("dp", "mp", "sp"))
    files = _compile(tmp_path, "auto_parallel", Net((layout("dp", "mp"), layout("mp", "sp")),
                                                    (layout(("dp", "mp"), "sp"),)))
    assert len(files) == 2 and files[0].startswith("step_auto_parallel_begin_")
    assert files[1].startswith("step_parallel_begin_") and files[0][-8:] == files[1][-8:]  # one NNNN for both
    # the grep MindSpore's check_layout_config runs
    line = subprocess.check_output(["grep", "-r", "(out1) = PrimFunc_MatMul", str(tmp_path / "rank_0")]).decode()
    assert ("in_layout: ({'device_matrix': (2, 2, 2), 'tensor_map': (2, 1), 'interleaved_parallel': false, "
            "'alias_name': (dp, mp, sp)}, {'device_matrix': (2, 2, 2), 'tensor_map': (1, 0)") in line
    assert "out_layout: ({'device_matrix': (2, 2, 2), 'tensor_map': ((2, 1), 0)" in line
    assert "{instance name: matmul1}" in line and line.count("\n") == 1
    text = (tmp_path / "rank_0" / files[0]).read_text()
    assert "(out) = PrimFunc_Add(" in text
    assert "(y) = " not in text and "(CNode_" in text and ") = PrimFunc_ReLU(" in text
    # graphpar's reader still reads its own begin dump from the same directory
    assert load(tmp_path / "rank_0").begin is not None


def test_semi_auto_parallel_writes_only_graphpars_dump(tmp_path):
    files = _compile(tmp_path, "semi_auto_parallel", Net())
    assert len(files) == 1 and files[0].startswith("step_parallel_begin_")
