"""A searched plan writes nothing to stdout: HiGHS prints its banner from C++ when a solver is constructed, before
any option can silence it, and a user's script output (or a notebook cell) must not carry the solver's
copyright lines on every plan (issue 26)."""

import graphpar as ms
from graphpar import nn
from graphpar.models.mlp import mlp_data, search_mlp


def test_a_searched_plan_prints_nothing_on_stdout(capfd):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="dynamic_programming", device_num=8)
    net = search_mlp(layers=2, width=64)
    x, y = mlp_data(16, 64)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    capfd.readouterr()
    planned = train.program.plan_graph([x, y])
    out = capfd.readouterr().out
    assert planned.plan.mesh is not None
    assert "HiGHS" not in out and out == ""
    ms.reset_auto_parallel_context()
