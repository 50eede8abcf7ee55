"""MindSpore 2.x's functional loop sample (scripts/functional_step_port.py: ``value_and_grad`` + ``@ms.jit`` +
``optimizer(grads)`` over ``dataset.create_tuple_iterator()``), its imports changed only, checked for the sample's
own claims: the loss falls; the strategies given with shard() are the plan (begin dump) and layer1's split
contraction is reduced by a forward AllReduce (execute dump); MindSpore 2.6's ``AutoParallel(train_step,
parallel_mode="semi_auto")`` trains exactly as ``set_auto_parallel_context(parallel_mode=SEMI_AUTO_PARALLEL)``."""

import graphpar as ms
from tests.functional.steps import dump_file
from tests.ports.scripts.functional_step_port import train


def _run(tmp_path, mode):
    ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path / mode))
    return train(mode)


def test_functional_sample_trains_planned_in_semi_auto_and_under_auto_parallel(tmp_path):
    losses = _run(tmp_path, "semi_auto")
    assert sum(losses[-4:]) < sum(losses[:4])
    begin = dump_file(tmp_path / "semi_auto", 0, "step_parallel_begin")
    assert "in_strategy: ((2, 4), (4, 1))} : (<Tensor[Float32], (32, 64)>" in begin
    assert "in_strategy: ((1, 2), (2, 4))} : (<Tensor[Float32], (32, 128)>" in begin
    execute = dump_file(tmp_path / "semi_auto", 0, "18_execute").splitlines()
    layer1 = next(i for i, l in enumerate(execute) if "{instance name: matmul}" in l and "(16, 16)" in l)
    following = execute[layer1 + 1:layer1 + 6]
    assert any("AllReduce(" in l and "pass: forward" in l and "rank_list: (0, 1, 2, 3)" in l for l in following)
    assert _run(tmp_path, "auto_parallel_wrapper") == losses
    assert ms.get_auto_parallel_context("parallel_mode") == "stand_alone"


def test_functional_sample_propagates_from_one_hint_in_auto_parallel(tmp_path):
    losses = _run(tmp_path, "sharding_propagation")
    assert sum(losses[-4:]) < sum(losses[:4])
    begin = dump_file(tmp_path / "sharding_propagation", 0, "step_parallel_begin")
    assert "propagated from" in begin and "provenance: user" in begin
