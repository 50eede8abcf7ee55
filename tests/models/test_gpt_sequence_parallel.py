"""Sequence and context parallel on the GPT of ``graphpar.models.gpt``, as MindFormers' parallel config selects
them: ``use_seq_parallel`` (Megatron's), ``context_parallel`` with ``context_parallel_algo`` ``"colossalai_cp"``
(ring attention) or ``"ulysses_cp"``, and ``use_flash_attention``.

Each is checked three ways: losses equal the unsplit model's (rtol 1e-5), the collectives XLA compiled (from the
HLO, with their device groups), and for sequence parallel the compiled step's temporary memory.
"""

import collections

import numpy as np
import pytest

import graphpar as ms
from graphpar.dump.hlo import parse_collectives
from graphpar.models.gpt import GPT, QKV, gpt_data, gpt_train_cell

SMALL = dict(hidden=64, heads=4, vocab=128, layers=1)
SEQ = 64


def _train(mode, seq, batch, steps=2, **options):
    """(losses, compiled step) of ``steps`` training steps of the GPT with ``options``: the step as it runs
    (``lowered().compile()`` passes the lowering's compiler options: XLA:CPU's memory-optimized scheduler for a
    program holding a ``jax.checkpoint``, as flash attention's blocks are)."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode)
    ids, labels = gpt_data(batch=batch, seq=seq)
    train = gpt_train_cell(GPT(seq=seq, **{**SMALL, **options}))
    losses = [float(train(ids, labels)) for _ in range(steps)]
    return losses, train.program.lowered([ids, labels]).compile()


def _collectives(compiled):
    """(kind, device groups) -> count, over the whole compiled step."""
    return collections.Counter((c.kind, tuple(map(tuple, c.groups))) for c in parse_collectives(compiled.as_text(), 8))


MP_GROUPS = ((0, 1, 2, 3), (4, 5, 6, 7))  # dp 2 x mp 4: the model-parallel groups
CP_GROUPS = ((0, 2), (1, 3), (4, 6), (5, 7))  # dp 2 x cp 2 x mp 2 (rank = 4 dp + 2 cp + mp): the cp groups


@pytest.fixture(scope="module")
def unsplit():
    """The reference: the same GPT on one device (STAND_ALONE), batch 2."""
    return _train("stand_alone", SEQ, 2, dp=1, mp=1)[0]


def test_sequence_parallel_gathers_before_and_scatters_after_the_tensor_parallel_matmuls(unsplit):
    """dp 2 x mp 4: the LayerNorm/residual rows split 8 ways; each column-parallel entry all-gathers its rows over
    the mp group (forward: the Q/K/V and the first feed-forward matmul), losses equal."""
    plain_losses, plain = _train("semi_auto_parallel", SEQ, 2, dp=2, mp=4)
    losses, sp = _train("semi_auto_parallel", SEQ, 2, dp=2, mp=4, use_seq_parallel=True)
    np.testing.assert_allclose(losses, unsplit, rtol=1e-5)
    np.testing.assert_allclose(plain_losses, unsplit, rtol=1e-5)
    gathers = _collectives(sp)[("AllGather", MP_GROUPS)] - _collectives(plain)[("AllGather", MP_GROUPS)]
    assert gathers >= 2 * SMALL["layers"], _collectives(sp)
    # XLA:CPU has no reduce-scatter creator: the row-parallel exit (out_strategy ((8, 1),)) compiles to the
    # all-reduce it had and a slice; XLA on GPU/TPU forms the reduce-scatter from that pair
    assert not [k for k in _collectives(sp) if k[0] in ("AlltoAll", "CollectivePermute")]


@pytest.mark.parametrize("algo,kind", [("colossalai_cp", "CollectivePermute"), ("ulysses_cp", "AlltoAll")])
def test_context_parallel_equals_the_unsplit_model(unsplit, algo, kind):
    """dp 2 x cp 2 x mp 2, one sequence per data-parallel rank: ring attention passes the key/value blocks round
    each cp group (collective-permutes), Ulysses moves query/key/value from sequence- to head-split and back
    (all-to-alls), each over the cp groups only; losses equal the one-device model's."""
    losses, compiled = _train("semi_auto_parallel", SEQ, 2, dp=2, mp=2, context_parallel=2,
                              context_parallel_algo=algo, use_flash_attention=True)
    np.testing.assert_allclose(losses, unsplit, rtol=1e-5)
    found = _collectives(compiled)
    ours = [groups for (k, groups), n in found.items() for _ in range(n) if k == kind]
    assert len(ours) >= 2, found  # key and value (ring) / query, key, value and the output (Ulysses)
    # a collective-permute's groups are its (source, target) pairs: each inside one cp group
    assert all(any(set(g) <= set(cp) for cp in CP_GROUPS) for groups in ours for g in groups), found
    other = "AlltoAll" if kind == "CollectivePermute" else "CollectivePermute"
    assert not [k for k in found if k[0] == other], found


def test_settings_that_cannot_hold_are_refused():
    with pytest.raises(ValueError, match="use_flash_attention=True"):
        GPT(dp=1, mp=4, context_parallel=2)
    with pytest.raises(ValueError, match="need hints=ALL"):
        GPT(dp=2, mp=4, hints=QKV, use_seq_parallel=True)  # the LayerNorms would keep (dp, 1): nothing to do
    with pytest.raises(ValueError, match="context_parallel_algo='ring'"):
        GPT(dp=1, mp=4, context_parallel=2, use_flash_attention=True, context_parallel_algo="ring")


@pytest.mark.slow
def test_sequence_parallel_with_flash_attention_cuts_activation_memory_below_035():
    """dp 2 x mp 4, seq 1024, 2 layers: the compiled step's temp bytes (its activations: parameters and optimizer
    state are arguments). Megatron's sequence parallel alone removes the replicated LayerNorm/residual rows but not
    the (seq x seq) attention scores, which dominate at seq 1024 (about 0.92 x); with FlashAttentionScore (scores
    recomputed block by block in the backward) the two reach about 0.30 x. At wider models the scores matter less
    and neither reaches 0.35 x (docs/models.md, "Activation memory": Megatron's formula and the figures)."""
    big = dict(seq=1024, batch=2, dp=2, mp=4, layers=2)
    temp, losses = {}, {}
    for name, options in [("plain", {}), ("sp", dict(use_seq_parallel=True)),
                          ("sp+fa", dict(use_seq_parallel=True, use_flash_attention=True))]:
        losses[name], compiled = _train("semi_auto_parallel", big["seq"], big["batch"], dp=2, mp=4, layers=2,
                                        **options)
        temp[name] = compiled.memory_analysis().temp_size_in_bytes
    print({k: round(v / temp["plain"], 3) for k, v in temp.items()}, temp)
    np.testing.assert_allclose(losses["sp"], losses["plain"], rtol=1e-5)
    np.testing.assert_allclose(losses["sp+fa"], losses["plain"], rtol=1e-5)
    assert temp["sp"] < temp["plain"]
    assert temp["sp+fa"] <= 0.35 * temp["plain"], temp
