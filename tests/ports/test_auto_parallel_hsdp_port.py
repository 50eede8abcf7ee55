"""MindSpore 2.6's functional sample with optimizer parallel: ``AutoParallel(train_step, parallel_mode="semi_auto")``
and ``.hsdp()`` (scripts/functional_step_port.py, mode ``auto_parallel_hsdp``), its imports changed only, checked for
the tutorial's claim: each device keeps only its share of the weights and their optimizer state, gathered
(AllGather over the data-parallel group) before the forward pass, and training is unchanged."""

import graphpar as ms
from tests.functional.steps import dump_file
from tests.ports.scripts.functional_step_port import train


def _gathers(directory):
    """The weight AllGathers of the step: collectives the optimizer update adds (not attributed to an op)."""
    return [line for line in dump_file(directory, 0, "18_execute").splitlines()
            if line.startswith("%c") and "= AllGather()" in line and "pass: forward" in line]


def test_hsdp_sample_gathers_the_sharded_weights_and_trains_as_semi_auto(tmp_path):
    losses = {}
    for mode in ("semi_auto", "auto_parallel_hsdp"):
        ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path / mode))
        losses[mode] = train(mode)
    assert losses["auto_parallel_hsdp"] == losses["semi_auto"]
    assert sum(losses["semi_auto"][-4:]) < sum(losses["semi_auto"][:4])
    gathered = _gathers(tmp_path / "auto_parallel_hsdp")
    # layer1.weight (64, 128), split (4, 1) by its shard() hint, is split again over its data-parallel pair of
    # devices; the biases and layer3.weight, replicated by the plan, over all eight
    assert any("rank_list: (0, 4)" in line and "bytes: 8192" in line for line in gathered)
    assert sum("rank_list: (0, 1, 2, 3, 4, 5, 6, 7)" in line for line in gathered) >= 3
    assert len(gathered) > len(_gathers(tmp_path / "semi_auto"))
    assert ms.get_auto_parallel_context("enable_parallel_optimizer") is False
