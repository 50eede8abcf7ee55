"""Expert parallel: the GPT of graphpar/models/gpt.py with every feed-forward replaced by MindSpore's MoE layer
(8 experts, top-2, capacity factor 1.0 so that tokens are dropped), on 8 devices as MindSpore configures it:
``data_parallel=8`` (the router splits the tokens into 8 groups, one per device) with ``expert_parallel=4`` (the
experts split 4 ways, their feed-forward data parallel 8 / 4 = 2).

Checked three ways: losses (with the load-balancing loss) against STAND_ALONE, the collectives XLA compiled (each
layer's dispatch and combine are one all-to-all each over an expert-parallel group of 4 ranks, forward and
backward), and the execute dumps, which show them under the ops that cause them with their groups and bytes.
"""

import collections

import numpy as np
import pytest

import graphpar as ms
from graphpar.dump.hlo import parse_collectives
from graphpar.dump.loading import load
from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell
from graphpar.nn.transformer import MoEConfig

# ~50 s on this machine: two GPT compiles and the dumps of 8 ranks; tests/nn/test_moe_parallel.py is the fast check
pytestmark = pytest.mark.slow

LAYERS, STEPS, BATCH, SEQ, HIDDEN = 2, 3, 8, 8, 32
MOE = dict(expert_num=8, num_experts_chosen=2, capacity_factor=1.0)


def _train(mode):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode)
    net = GPT(dp=8, mp=1, seq=SEQ, hidden=HIDDEN, layers=LAYERS, moe_config=MoEConfig(**MOE), expert_parallel=4)
    return gpt_train_cell(net)


@pytest.fixture(scope="module")
def semi(tmp_path_factory):
    """SEMI_AUTO on 8 devices with the dumps on: (graph, compiled HLO, losses, dump directory)."""
    dumps = tmp_path_factory.mktemp("moe") / "ir_dumps"
    ms.set_context(save_graphs=True, save_graphs_path=str(dumps))
    ids, labels = gpt_data(BATCH, SEQ)
    train = _train("semi_auto_parallel")
    losses = [float(train(ids, labels)) for _ in range(STEPS)]
    stages = train.program.stages([ids, labels])  # the program the steps ran
    hlo, graph = stages.compiled.as_text(), stages.planned.graph
    ms.set_context(save_graphs=False)
    return graph, hlo, losses, dumps


def test_moe_gpt_losses_equal_one_device(semi):
    ids, labels = gpt_data(BATCH, SEQ)
    train = _train("stand_alone")
    alone = [float(train(ids, labels)) for _ in range(STEPS)]
    np.testing.assert_allclose(semi[2], alone, rtol=1e-5)
    assert alone[-1] < alone[0]


def test_dispatch_and_combine_are_all_to_alls_over_the_expert_group(semi):
    graph, hlo, _, _ = semi
    counts, sizes = collections.Counter(), set()
    for c in parse_collectives(hlo, 8):
        owners = [graph.nodes[n] for n in c.nodes if n in graph.nodes]
        if owners and all("-MoE" in n.scope + "/" + n.instance_name for n in owners) and c.kind == "AlltoAll":
            counts["backward" if c.backward else "forward"] += 1
            sizes.add((c.group_of(0), c.group_of(4), c.nbytes))
        assert c.kind != "AllGather", c  # no redistribution gathers the tokens
    # per layer: dispatch (into the experts' first BatchMatMul) and combine (into from_experts), and their
    # gradients; each moves a device's (E/ep * ep, capacity, hidden) block: 8 experts x capacity 2 x 32 floats
    assert counts == {"forward": 2 * LAYERS, "backward": 2 * LAYERS}, counts
    assert sizes == {((0, 1, 2, 3), (4, 5, 6, 7), 8 * 2 * HIDDEN * 4)}, sizes


def test_execute_dump_shows_the_all_to_alls_under_their_ops(semi):
    dumps = semi[3]
    for rank, group in ((0, (0, 1, 2, 3)), (5, (4, 5, 6, 7))):
        execute = load(dumps, rank=rank).execute
        a2a = [(n.instance_name, c.pass_, c.group, c.bytes) for n in execute.nodes for c in n.collectives
               if c.kind == "AlltoAll"]
        assert len(a2a) == 4 * LAYERS, a2a
        fwd = collections.Counter(name for name, pass_, _, _ in a2a if pass_ == "forward")
        assert fwd == {"matmul": LAYERS, "from_experts": LAYERS}, fwd  # dispatch, combine
        assert {(g, b) for _, _, g, b in a2a} == {(group, 8 * 2 * HIDDEN * 4)}
