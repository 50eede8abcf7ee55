"""A MindSpore user's MoE network (scripts/moe_port.py: ``TransformerOpParallelConfig(data_parallel=8,
expert_parallel=4)``, ``MoEConfig``, ``MoE`` from ``mindspore.parallel._transformer``, the load-balancing loss added
in the loss cell, ``Model.train`` with ``LossMonitor``), imports changed only: under SEMI_AUTO_PARALLEL on 8
devices it prints the losses of the same script in STAND_ALONE, and its execute dump shows the MoE's dispatch and
combine as AlltoAlls over the expert-parallel group."""

import re

import numpy as np
import pytest

import graphpar as ms
from graphpar.dump.loading import load
from tests.ports.scripts import moe_port


def _losses(capsys, mode):
    moe_port.main(mode)
    return [float(v) for v in re.findall(r"epoch: \d+ step: \d+, loss is (\S+)", capsys.readouterr().out)]


@pytest.mark.slow  # two programs compiled and the dumps of 8 ranks written: ~20 s on the shared 2-core machine
def test_moe_sample_trains_as_on_one_device_with_all_to_alls(capsys, tmp_path):
    ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path))
    semi = _losses(capsys, "semi_auto_parallel")
    ms.set_context(save_graphs=False)
    ms.reset_auto_parallel_context()
    alone = _losses(capsys, "stand_alone")
    assert len(semi) == 8
    np.testing.assert_allclose(semi, alone, rtol=1e-5)
    assert sum(semi[4:]) < sum(semi[:4])
    execute = load(tmp_path, rank=6).execute
    a2a = sorted((n.instance_name, c.pass_, c.group) for n in execute.nodes for c in n.collectives
                 if c.kind == "AlltoAll")
    assert a2a == [("from_experts", "forward", (4, 5, 6, 7)), ("matmul", "forward", (4, 5, 6, 7)),
                   ("reshape", "backward", (4, 5, 6, 7)), ("reshape", "backward", (4, 5, 6, 7))], a2a
