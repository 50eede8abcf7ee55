"""A strategy ``load_file`` written for another network is refused by name; one that partly matches is applied
with a warning naming the entries it ignores (issue 27, item 7)."""

import json
import logging

import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.common import Parameter, Tensor
from graphpar.errors import ConfigError

from .helpers import quickstart_net, rand

X, Y = rand(16, 32), rand(16, 16, seed=3)


class OtherNet(nn.Cell):
    """Another network: no op instance or parameter name in common with the quickstart's."""

    def __init__(self):
        super().__init__()
        self.kernel = Parameter(Tensor(rand(32, 16, seed=5) * 0.1), name="kernel")
        self.dense_mm = ops.MatMul().shard(((2, 4), (4, 1)))

    def construct(self, x):
        return self.dense_mm(x, self.kernel)


def _plan(net, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(**{"parallel_mode": "semi_auto_parallel", **ctx})
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.2, 0.1))
    return train.program.plan_graph([X, Y])


def test_a_file_of_another_network_is_refused_by_name(tmp_path):
    path = tmp_path / "strategy.json"
    _plan(quickstart_net(), strategy_ckpt_config={"save_file": str(path)})
    with pytest.raises(ConfigError) as caught:
        _plan(OtherNet(), strategy_ckpt_config={"load_file": str(path)})
    message = str(caught.value)
    entries = len(json.loads(path.read_text())["graphpar"]["strategies"]) + 2  # ops and the parameters w, w2
    assert str(path) in message and "none of its 2 parameters" in message and f"of its {entries} entries" in message
    assert "'w'" in message and "MatMul-matmul" in message  # the file's names
    assert "'kernel'" in message and "MatMul-dense_mm" in message  # the network's names


def test_a_partly_matching_file_warns_once_naming_what_it_ignores(tmp_path, caplog):
    path = tmp_path / "strategy.json"
    _plan(quickstart_net(), strategy_ckpt_config={"save_file": str(path)})
    data = json.loads(path.read_text())
    data["parallel_layout_item"]["gone.weight"] = dict(data["parallel_layout_item"]["w"])
    stale = "Default/network-WithLossCell/_backbone-QuickstartNet/MatMul-removed"
    data["graphpar"]["strategies"][stale] = dict(data["graphpar"]["strategies"][
        "Default/network-WithLossCell/_backbone-QuickstartNet/MatMul-matmul"])
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="graphpar"):
        graph = _plan(quickstart_net(hint=None), parallel_mode="auto_parallel", search_mode="sharding_propagation",
                      strategy_ckpt_config={"load_file": str(path)})
        _plan(quickstart_net(hint=None), parallel_mode="auto_parallel", search_mode="sharding_propagation",
              strategy_ckpt_config={"load_file": str(path)})
    assert graph.find("matmul")[0].strategy.in_strategy() == ((2, 4), (4, 1))  # the matching entries still apply
    warnings = [r.getMessage() for r in caplog.records if "name no op or parameter" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "'gone.weight'" in warnings[0] and "MatMul-removed" in warnings[0] and "2 name no op" in warnings[0]


def test_a_file_matching_every_entry_says_nothing(tmp_path, caplog):
    path = tmp_path / "strategy.json"
    _plan(quickstart_net(), strategy_ckpt_config={"save_file": str(path)})
    with caplog.at_level(logging.WARNING, logger="graphpar"):
        _plan(quickstart_net(), strategy_ckpt_config={"load_file": str(path)})
    assert "name no op or parameter" not in caplog.text
