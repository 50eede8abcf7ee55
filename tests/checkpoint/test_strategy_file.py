"""Strategy files (strategy_ckpt_config save_file / load_file), build_searched_strategy, merge_sliced_parameter,
transform_checkpoints and load_distributed_checkpoint."""

import json
import logging

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.checkpoint import (
    build_searched_strategy, load_checkpoint, load_distributed_checkpoint, merge_sliced_parameter, save_checkpoint,
    transform_checkpoints)
from graphpar.errors import ConfigError

from .helpers import params, quickstart_net, rand

X, Y = rand(16, 32), rand(16, 16, seed=3)


def _plan(net, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(**{"parallel_mode": "auto_parallel", "search_mode": "sharding_propagation", **ctx})
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.2, 0.1))
    return train, train.program.plan_graph([X, Y])


def _strategies(graph):
    return {n.instance_name: n.strategy.in_strategy() for n in graph.node_list()}


def test_save_file_records_mindspore_layouts_and_every_op_strategy(tmp_path):
    path = tmp_path / "strategy.json"
    _plan(quickstart_net(), strategy_ckpt_config={"save_file": str(path)})
    data = json.loads(path.read_text())
    assert data["parallel_layout_item"]["w"] == {"dev_matrix": [2, 4], "tensor_map": [0, -1], "tensor_shape": [32, 16],
                                                 "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}
    scope = "Default/network-WithLossCell/_backbone-QuickstartNet"
    items = data["parallel_strategy_item"]
    assert items[f"{scope}/MatMul-matmul"]["parallel_strategy"] == [[2, 4], [4, 1]]
    assert items[f"{scope}/ReLU-relu"]["parallel_strategy"] == [[2, 4]]
    extra = data["graphpar"]
    assert extra["mesh"] == {"axis_names": ["m0", "m1", "m2"], "axis_sizes": [2, 2, 2]} and extra["device_num"] == 8
    assert extra["layouts"]["w"] == {"mesh_spec": [["m1", "m2"], []], "trainable": True}
    assert extra["strategies"][f"{scope}/ReLU-relu"]["provenance"] == "propagated"
    layouts = build_searched_strategy(str(path))
    assert layouts["w2"].dev_matrix == [2, 4] and layouts["w2"].tensor_map == [0, -1]


def test_load_file_forces_the_recorded_plan_on_a_network_without_hints(tmp_path):
    path = tmp_path / "strategy.json"
    hinted, graph = _plan(quickstart_net(), strategy_ckpt_save_file=str(path))
    want = _strategies(graph)
    losses = [float(hinted(X, Y)) for _ in range(3)]
    # without hints, sharding propagation starts from the dataset's layout (MindSpore's default): another plan
    _, unhinted = _plan(quickstart_net(hint=None))
    assert _strategies(unhinted) != want
    forced, graph = _plan(quickstart_net(hint=None), strategy_ckpt_config={"load_file": str(path)})
    assert _strategies(graph) == want
    assert "strategy file" in graph.find("relu")[0].provenance.detail
    assert [float(forced(X, Y)) for _ in range(3)] == losses


def test_load_file_overrides_a_different_hint_with_a_warning(tmp_path, caplog):
    path = tmp_path / "strategy.json"
    _plan(quickstart_net(), strategy_ckpt_config={"save_file": str(path)})
    with caplog.at_level(logging.WARNING, logger="graphpar"):
        _, graph = _plan(quickstart_net(((4, 2), (2, 1))), parallel_mode="semi_auto_parallel",
                         strategy_ckpt_load_file=str(path))
    assert graph.find("matmul")[0].strategy.in_strategy() == ((2, 4), (4, 1))
    assert "overridden by the strategy file" in caplog.text


def test_load_file_of_another_device_count_is_refused(tmp_path):
    path = tmp_path / "strategy.json"
    _plan(quickstart_net(), strategy_ckpt_config={"save_file": str(path)})
    with pytest.raises(ConfigError, match="written for 8 devices but this job plans for 4"):
        _plan(quickstart_net(((2, 2), (2, 1))), device_num=4, strategy_ckpt_config={"load_file": str(path)})
    with pytest.raises(ConfigError, match="no such file"):
        _plan(quickstart_net(), strategy_ckpt_config={"load_file": str(tmp_path / "missing.json")})


def test_only_trainable_params(tmp_path):
    for only, names in ((True, ["w"]), (False, ["w", "w2"])):
        net = quickstart_net()
        net.weight2.requires_grad = False
        path = tmp_path / f"s_{only}.json"
        _plan(net, strategy_ckpt_config={"save_file": str(path), "only_trainable_params": only})
        assert sorted(json.loads(path.read_text())["parallel_layout_item"]) == names


@pytest.fixture
def sliced(tmp_path):
    """A sliced (integrated_save=False) checkpoint of the quickstart trained 2 steps on 8 devices."""
    net = quickstart_net()
    train, _ = _plan(net, strategy_ckpt_config={"save_file": str(tmp_path / "s8.json")})
    for _ in range(2):
        train(X, Y)
    save_checkpoint(train, str(tmp_path / "sliced"), integrated_save=False)
    return tmp_path, params(net)


def test_sliced_checkpoint_rows_merge_back(sliced):
    root, values = sliced
    loaded = load_checkpoint(str(root / "sliced.ckpt"))
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name].asnumpy(), value)
    # MindSpore's flow: one checkpoint per rank holding its slices, merged with the training strategy
    transform_checkpoints(str(root / "sliced.ckpt"), str(root / "per_rank"), "rank", None, str(root / "s8.json"))
    slices = [load_checkpoint(str(root / "per_rank" / f"rank_{r}" / f"rank{r}.ckpt"))["w"] for r in range(8)]
    assert slices[0].shape == (8, 16) and slices[1].shape == (8, 16)
    strategy = build_searched_strategy(str(root / "s8.json"))
    np.testing.assert_array_equal(merge_sliced_parameter(slices, strategy).asnumpy(), values["w"])
    np.testing.assert_array_equal(merge_sliced_parameter(slices[:4]).asnumpy(),
                                  np.concatenate([s.asnumpy() for s in slices[:4]]))
    with pytest.raises(KeyError, match="'w' is not in the strategy"):
        merge_sliced_parameter(slices, {"w2": strategy["w2"]})
    with pytest.raises(ValueError, match="one slice per rank"):
        merge_sliced_parameter(slices[:3], strategy)


def test_transform_to_four_devices_and_load_distributed(sliced):
    root, values = sliced
    _plan(quickstart_net(((2, 2), (2, 1))), device_num=4, strategy_ckpt_config={"save_file": str(root / "s4.json")})
    transform_checkpoints(str(root / "sliced.ckpt"), str(root / "four"), "ckpt_", None, str(root / "s4.json"))
    files = [str(root / "four" / f"rank_{r}" / f"ckpt_{r}.ckpt") for r in range(4)]
    assert load_checkpoint(files[1])["w"].shape == (16, 16)  # ((2, 2), (2, 1)): w split 2 on its rows
    ms.set_auto_parallel_context(device_num=4)
    net = quickstart_net(((2, 2), (2, 1)))
    load_distributed_checkpoint(net, files)
    for name, value in values.items():
        np.testing.assert_array_equal(params(net)[name], value)


@pytest.mark.parametrize("spec", [[["m1", "m2"], []], [["m0"], ["m2"]], [["m2", "m0"], []], [[], ["m0", "m1", "m2"]],
                                  [["m1"], ["m0"]], [[], []]])
def test_tensor_map_slices_match_jax_placement(spec):
    """MindSpore's (dev_matrix, tensor_map) derived from a mesh-axis spec puts every rank's slice exactly where JAX
    puts that device's shard."""
    import jax
    from jax.sharding import NamedSharding

    from graphpar.planner.mesh import make_mesh
    from graphpar.planner.strategy import to_partition_spec
    from graphpar.planner.tensor_layout import from_mesh_spec, rank_slices

    mesh = make_mesh(jax.devices(), [(2, 2, 2)])
    dev_matrix, tensor_map = from_mesh_spec(spec, mesh.axis_names, [2, 2, 2])
    shape = (16, 8)
    index = NamedSharding(mesh, to_partition_spec(tuple(tuple(s) for s in spec))).devices_indices_map(shape)
    want = [tuple((s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(index[d], shape))
            for d in jax.devices()]
    got = [tuple((s.start, s.stop) for s in sl) for sl in rank_slices(dev_matrix, tensor_map, shape)]
    assert got == want, (dev_matrix, tensor_map)
