"""MindSpore's MoE routing (graphpar.nn.transformer: TopkRouter, MoE) on tiny inputs computed by hand: which tokens
get which capacity slot, which are dropped, the combine weights, the layer's output and the load-balancing loss.

MindSpore's rules (mindspore.parallel._transformer.moe): capacity = ceil(k * tokens_per_group * capacity_factor /
expert_num); tokens claim their expert's slots in token order within their group, round by round (every token's
first choice, then every token's second choice after the slots the first round took); a token over capacity is
dropped for that round, its gate zeroed, and the expert it was refused stays available to it in the next round.
"""

import numpy as np
import pytest

import graphpar as ms
from graphpar.errors import ConfigError
from graphpar.nn.transformer import MoE, MoEConfig, MoEParallelConfig, TopkRouter
from graphpar.nn.transformer.router import calculate_expert_capacity


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_capacity_is_mindspores_ceiling():
    assert calculate_expert_capacity(1, 6, 1.0, 3) == 2
    assert calculate_expert_capacity(2, 4, 1.0, 3) == 3  # 2.67 -> 3
    assert calculate_expert_capacity(2, 16, 1.1, 8) == 5  # 4.4 -> 5
    assert calculate_expert_capacity(1, 8, 1.0, 4) == 2  # exact: not rounded up


# one group of 6 tokens, 3 experts, top-1, capacity 2: tokens 0, 1, 2 and 5 want expert 0
LOGITS_TOP1 = np.array([[3.0, 1, 0], [2, 0, 1], [4, 1, 1], [0, 3, 1], [0, 1, 2], [5, 0, 0]], np.float32)


def test_top1_tokens_over_capacity_are_dropped_in_token_order():
    router = TopkRouter(3, MoEConfig(expert_num=3, capacity_factor=1.0, num_experts_chosen=1),
                        parallel_config=MoEParallelConfig())
    dispatch, combine, loss = router(ms.Tensor(LOGITS_TOP1[None]))
    dispatch, combine = np.asarray(dispatch)[0], np.asarray(combine)[0]
    assert dispatch.shape == (6, 3, 2)  # (tokens, experts, capacity)
    # expert 0's two slots go to tokens 0 and 1 (token order); tokens 2 and 5 are dropped
    placed = {t: tuple(np.argwhere(dispatch[t]).ravel()) for t in range(6)}
    assert placed == {0: (0, 0), 1: (0, 1), 2: (), 3: (1, 0), 4: (2, 0), 5: ()}
    prob = _softmax(LOGITS_TOP1)
    for t, (e, slot) in ((0, (0, 0)), (1, (0, 1)), (3, (1, 0)), (4, (2, 0))):
        assert combine[t, e, slot] == pytest.approx(prob[t, e], rel=1e-6)  # the gate: the chosen probability
    assert combine[2].sum() == 0 and combine[5].sum() == 0
    # load balancing (before capacity): 4/6 of the tokens chose expert 0, 1/6 expert 1, 1/6 expert 2
    density = np.array([4, 1, 1]) / 6
    assert float(loss) == pytest.approx(3 * 3 * np.mean(density * prob.mean(0)), rel=1e-6)


def test_top2_second_round_counts_the_first_rounds_slots():
    # 4 tokens, 3 experts, top-2, capacity ceil(2 * 4 / 3) = 3; every token's first choice is expert 0
    logits = np.array([[3.0, 2, 0], [3, 2, 0], [3, 0, 2], [3, 0, 2]], np.float32)
    router = TopkRouter(3, MoEConfig(expert_num=3, capacity_factor=1.0, num_experts_chosen=2),
                        parallel_config=MoEParallelConfig())
    dispatch, combine, _ = router(ms.Tensor(logits[None]))
    dispatch, combine = np.asarray(dispatch)[0], np.asarray(combine)[0]
    placed = {t: sorted(map(tuple, np.argwhere(dispatch[t]))) for t in range(4)}
    # round 1: tokens 0-2 take expert 0's slots 0-2, token 3 is dropped; round 2: expert 0 stays token 3's best
    # (its refusal does not zero it), slot 3 >= capacity: dropped again; tokens 0, 1 -> expert 1 slots 0, 1,
    # token 2 -> expert 2 slot 0
    assert placed == {0: [(0, 0), (1, 0)], 1: [(0, 1), (1, 1)], 2: [(0, 2), (2, 0)], 3: []}
    prob = _softmax(logits)
    # top-2 weights are divided by their sum
    w = prob[0, 0] / (prob[0, 0] + prob[0, 1])
    assert combine[0, 0, 0] == pytest.approx(w, rel=1e-6) and combine[0, 1, 0] == pytest.approx(1 - w, rel=1e-5)
    assert combine[3].sum() == 0


def test_moe_output_is_the_gate_times_the_expert_and_zero_for_dropped_tokens():
    """Expert e computes (e + 1) * relu(x) (identity mapping, scaled identity projection); the router's dense is
    the identity, so the logits are the tokens themselves."""
    moe = MoE(hidden_size=3, ffn_hidden_size=3, dropout_rate=0.0, hidden_act="relu",
              moe_config=MoEConfig(expert_num=3, capacity_factor=1.0, aux_loss_factor=0.05),
              parallel_config=MoEParallelConfig())
    moe.router.dense.weight.set_data(ms.Tensor(np.eye(3, dtype=np.float32)))
    moe.ffn.mapping.weight.set_data(ms.Tensor(np.stack([np.eye(3, dtype=np.float32)] * 3)))
    moe.ffn.projection.weight.set_data(ms.Tensor(np.stack([(e + 1) * np.eye(3, dtype=np.float32)
                                                           for e in range(3)])))
    out, aux = moe(ms.Tensor(LOGITS_TOP1))
    prob = _softmax(LOGITS_TOP1)
    expected = np.zeros_like(LOGITS_TOP1)
    for t, e in ((0, 0), (1, 0), (3, 1), (4, 2)):  # tokens 2 and 5 dropped: zero
        expected[t] = prob[t, e] * (e + 1) * LOGITS_TOP1[t]
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6, atol=1e-7)
    density = np.array([4, 1, 1]) / 6
    assert float(aux) == pytest.approx(0.05 * 9 * np.mean(density * prob.mean(0)), rel=1e-6)


def test_groups_route_independently():
    """data_parallel=2 cuts the 6 tokens into two groups of 3, each with its own capacity ceil(3 / 3) = 1: in the
    first group expert 0's one slot goes to token 0 (tokens 1 and 2 dropped); in the second, tokens 3, 4, 5 want
    experts 1, 2, 0 and all fit."""
    router = TopkRouter(3, MoEConfig(expert_num=3, capacity_factor=1.0), parallel_config=MoEParallelConfig(2))
    dispatch, _, _ = router(ms.Tensor(LOGITS_TOP1.reshape(2, 3, 3)))
    dispatch = np.asarray(dispatch).reshape(6, 3, 1)
    assert [tuple(np.argwhere(dispatch[t]).ravel()) for t in range(6)] == [(0, 0), (), (), (1, 0), (2, 0), (0, 0)]


def test_expert_group_size_sets_the_router_groups():
    """MoEConfig(expert_group_size=3): the 6 tokens are routed in groups of 3 whatever data_parallel is (here 1),
    each group with its own capacity ceil(3 / 3) = 1: the same slots as two data-parallel groups above."""
    config = MoEConfig(expert_num=3, capacity_factor=1.0, expert_group_size=3)
    router = TopkRouter(3, config, parallel_config=MoEParallelConfig(1))
    dispatch, _, _ = router(ms.Tensor(LOGITS_TOP1[None]))
    assert np.asarray(dispatch).shape == (2, 3, 3, 1)  # (groups, group, experts, capacity)
    dispatch = np.asarray(dispatch).reshape(6, 3, 1)
    assert [tuple(np.argwhere(dispatch[t]).ravel()) for t in range(6)] == [(0, 0), (), (), (1, 0), (2, 0), (0, 0)]
    # the MoE layer's output: token 5 now gets expert 0 (its own group's slot), tokens 1 and 2 are dropped (zero)
    moe = MoE(3, 3, 0.0, hidden_act="relu", moe_config=config, parallel_config=MoEParallelConfig(1))
    moe.router.dense.weight.set_data(ms.Tensor(np.eye(3, dtype=np.float32)))  # the logits are the tokens
    for linear in (moe.ffn.mapping, moe.ffn.projection):
        linear.weight.set_data(ms.Tensor(np.stack([np.eye(3, dtype=np.float32)] * 3)))
    out, _ = moe(ms.Tensor(LOGITS_TOP1))
    kept = np.abs(np.asarray(out)).sum(-1) > 0
    assert kept.tolist() == [True, False, False, True, True, True]


def test_expert_group_size_must_split_the_tokens_over_data_parallel():
    moe = MoE(3, 3, 0.0, moe_config=MoEConfig(expert_num=3, expert_group_size=2), parallel_config=MoEParallelConfig(2))
    with pytest.raises(ConfigError, match=r"6 tokens .* do not split into router groups of expert_group_size=2"):
        moe(ms.Tensor(LOGITS_TOP1))  # 3 groups of 2: not a whole number per data_parallel rank


def test_tokens_must_split_into_the_groups():
    moe = MoE(3, 3, 0.0, moe_config=MoEConfig(expert_num=3), parallel_config=MoEParallelConfig(4))
    with pytest.raises(ConfigError, match=r"6 tokens .* do not split into data_parallel=4 groups"):
        moe(ms.Tensor(LOGITS_TOP1))


def test_mindspore_import_paths():
    """A MindSpore script's imports, with mindspore replaced by graphpar, reach these classes."""
    from graphpar.nn.transformer import MoEConfig as from_nn
    from graphpar.parallel._transformer import MoEConfig, TransformerOpParallelConfig
    from graphpar.parallel._transformer.moe import MoE as moe_class
    from graphpar.parallel._transformer.op_parallel_config import MoEParallelConfig as config_class

    assert MoEConfig is from_nn and moe_class is MoE and config_class is MoEParallelConfig
    config = TransformerOpParallelConfig(data_parallel=8, model_parallel=1, expert_parallel=4)
    assert (config.expert_parallel, config.moe_parallel_config.data_parallel) == (4, 8)


def test_one_expert_ignores_expert_parallel():
    """As MindSpore, expert_parallel applies only to expert_num > 1: one expert takes every token (gate 1, capacity
    ceil(1.1 T) >= T) and the balancing loss is 1 * aux_loss_factor."""
    moe = MoE(3, 3, 0.0, moe_config=MoEConfig(expert_num=1), parallel_config=MoEParallelConfig(2, 1, 2))
    _, aux = moe(ms.Tensor(LOGITS_TOP1))
    assert float(aux) == pytest.approx(0.05)
