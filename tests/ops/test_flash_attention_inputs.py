"""``ops.FlashAttentionScore``'s optional inputs (``real_shift``, ``attn_mask``), sparse modes 0-4, grouped
key/value heads and the SBH / BSND layouts, against a numpy softmax attention; and a MindSpore strategy with entries
for the given optional inputs, sequence-parallel (the key/value sequence whole), against STAND_ALONE."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import StrategyError
from tests.planner.helpers import forward, reference

B, N1, S, D = 2, 4, 32, 8
_RNG = np.random.default_rng(0)
Q = _RNG.normal(size=(B, N1, S, D)).astype(np.float32)
SHIFT = _RNG.normal(size=(B, N1, S, S)).astype(np.float32)
MASK = (_RNG.random((B, 1, S, S)) < 0.3).astype(np.uint8)  # 1: the key is discarded
TEMPLATE = np.triu(np.ones((2048, 2048), np.uint8), 1)  # the compressed mask of sparse modes 2-4


def _kv(n2, d2=D):
    return _RNG.normal(size=(B, n2, S, D)).astype(np.float32), _RNG.normal(size=(B, n2, S, d2)).astype(np.float32)


def _reference(q, k, v, scale, shift, discard):
    """softmax(scale * (shift + q k^T)) v over the keys ``discard`` keeps (MindSpore's order: shift, then scale);
    key/value head h // (N1 / N2) serves query head h; a row with every key discarded is zero."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, 1), np.repeat(v, group, 1)
    score = (np.einsum("bnqd,bnkd->bnqk", q, k) + (0 if shift is None else shift)) * scale
    score = np.where(discard, -np.inf, score)
    p = np.exp(score - np.maximum(score.max(-1, keepdims=True), -1e30))
    return np.einsum("bnqk,bnkd->bnqd", p / np.maximum(p.sum(-1, keepdims=True), 1e-30), v)


def _causal(offset=0):
    """True above the diagonal shifted right by ``offset`` (bottom-right alignment for S2 - S1 = offset)."""
    return np.arange(S)[None, :] > np.arange(S)[:, None] + offset


_BAND = _causal() | (np.arange(S)[None, :] < np.arange(S)[:, None] - 4)  # pre_tokens=4, next_tokens=0


@pytest.mark.parametrize("sparse_mode,mask,discard", [
    (0, MASK, MASK.astype(bool) | _BAND), (1, MASK, MASK.astype(bool)), (2, TEMPLATE, _causal()),
    (3, TEMPLATE, _causal()), (4, TEMPLATE, _BAND)])
def test_masks_and_sparse_modes_equal_the_masked_softmax(sparse_mode, mask, discard):
    """Mode 0 discards where attn_mask is 1 and outside the pre_tokens / next_tokens band; mode 1 where the mask
    is 1 only; modes 2-4 take the (2048, 2048) template and discard their band (2: causal; 4: pre_tokens=4,
    next_tokens=0 from the bottom-right; S1 == S2 here, so 3 is 2's and 4's band is mode 0's)."""
    k, v = _kv(N1)
    fa = ops.FlashAttentionScore(N1, scale_value=0.3, pre_tokens=4, next_tokens=0, input_layout="BNSD",
                                 sparse_mode=sparse_mode)
    out = fa(*(ms.Tensor(t) for t in (Q, k, v, SHIFT)), None, None, ms.Tensor(mask))[3].asnumpy()
    np.testing.assert_allclose(out, _reference(Q, k, v, 0.3, SHIFT, discard), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND"])
@pytest.mark.parametrize("n2,d2", [(2, 16), (1, D)])
def test_layouts_and_grouped_key_value_heads(layout, n2, d2):
    """Key/value of 2 heads (grouped) or 1 (multi-query), value head size 16 or the query's, in each layout: BSH's
    hidden is N * D, SBH is BSH with batch and sequence swapped, BSND is BNSD with N and S swapped."""
    k, v = _kv(n2, d2)
    to = {"BSH": lambda t: t.transpose(0, 2, 1, 3).reshape(B, S, -1),
          "SBH": lambda t: t.transpose(2, 0, 1, 3).reshape(S, B, -1),
          "BSND": lambda t: t.transpose(0, 2, 1, 3)}[layout]
    fa = ops.FlashAttentionScore(N1, scale_value=0.3, input_layout=layout)
    out = fa(*(ms.Tensor(to(t)) for t in (Q, k, v)), None, None, None, ms.Tensor(MASK))[3].asnumpy()
    np.testing.assert_allclose(out, to(_reference(Q, k, v, 0.3, None, MASK.astype(bool))), rtol=1e-4, atol=1e-5)


def test_dropout_keeps_the_weights_drop_mask_sets_scaled_by_one_over_keep_prob():
    """keep_prob=0.75 with drop_mask, DropoutGenMask's packed bits for (B, N1, S1, S2) reshaped to (B, N1, S1,
    S2 / 8): bit i % 8 of byte i // 8 keeps softmax weight i, scaled by 1 / 0.75 (the kernel's dropout)."""
    k, v = _kv(N1)
    keep = _RNG.random((B, N1, S, S)) < 0.75
    bits = np.packbits(keep, axis=-1, bitorder="little")  # (B, N1, S, S / 8) uint8
    fa = ops.FlashAttentionScore(N1, keep_prob=0.75, scale_value=0.3, input_layout="BNSD")
    out = fa(*(ms.Tensor(t) for t in (Q, k, v)), None, ms.Tensor(bits))[3].asnumpy()
    score = np.einsum("bnqd,bnkd->bnqk", Q, k) * 0.3
    p = np.exp(score - score.max(-1, keepdims=True))
    want = np.einsum("bnqk,bnkd->bnqd", p / p.sum(-1, keepdims=True) * keep / 0.75, v)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"keep_prob=0.75 takes the dropout bits drop_mask of shape \(2, 4, 32, 4\)"):
        fa(*(ms.Tensor(t) for t in (Q, k, v)))


def test_a_wrong_mask_shape_is_refused_by_name():
    k, v = _kv(N1)
    fa = ops.FlashAttentionScore(N1, input_layout="BNSD", sparse_mode=2)
    with pytest.raises(ValueError, match=r"sparse_mode=2 takes the compressed \(2048, 2048\) attn_mask"):
        fa(*(ms.Tensor(t) for t in (Q, k, v)), None, None, None, ms.Tensor(MASK))


class _Attention(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.fa = ops.FlashAttentionScore(N1, scale_value=0.3, input_layout="BSH")
        if strategy is not None:
            self.fa.shard(strategy)

    def construct(self, q, k, v, shift, mask):
        return self.fa(q, k, v, shift, None, None, mask)[3]


def _bsh(t):
    return ms.Tensor(t.transpose(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1))


def test_sequence_parallel_strategy_with_shift_and_mask_equals_stand_alone():
    """MindSpore's strategy for BSH with real_shift and attn_mask: query (dp, sp, mp), key/value (dp, 1, mp) (the
    key/value sequence whole: each device's query rows attend to every key), real_shift (dp, mp, sp, 1), attn_mask
    (dp, 1, sp, 1). The plan keeps those splits and the output is STAND_ALONE's."""
    k, v = _kv(N1)
    args = (_bsh(Q), _bsh(k), _bsh(v), ms.Tensor(SHIFT), ms.Tensor(MASK))
    strategy = ((2, 2, 2), (2, 1, 2), (2, 1, 2), (2, 2, 2, 1), (2, 1, 2, 1))
    got, _, graph = forward(_Attention(strategy), *args)
    np.testing.assert_allclose(got.asnumpy(), reference(_Attention(None), *args).asnumpy(), rtol=1e-5, atol=1e-6)
    assert graph.find("fa")[0].strategy.in_strategy() == strategy


def test_ring_attention_with_a_mask_is_refused_by_name():
    """Ring attention (the key/value sequence split as the query's) is built without masks: said by name."""
    k, v = _kv(N1)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    try:
        with pytest.raises(StrategyError, match="op .fa.*ring attention .* is built without real_shift, attn_mask"):
            _Attention(((2, 2, 2), (2, 2, 2), (2, 2, 2), (2, 2, 2, 1), (2, 1, 2, 1)))(
                _bsh(Q), _bsh(k), _bsh(v), ms.Tensor(SHIFT), ms.Tensor(MASK))
    finally:
        ms.reset_auto_parallel_context()


class _Grouped(nn.Cell):
    """BNSD, 4 query heads over 2 key/value heads, dropout bits and sparse mode 3's compressed mask."""

    def __init__(self, strategy):
        super().__init__()
        self.fa = ops.FlashAttentionScore(N1, keep_prob=0.75, scale_value=0.3, input_layout="BNSD", sparse_mode=3)
        if strategy is not None:
            self.fa.shard(strategy)

    def construct(self, q, k, v, bits, mask):
        return self.fa(q, k, v, None, bits, None, mask)[3]


def test_grouped_heads_with_dropout_split_by_heads_and_query_rows_equals_stand_alone():
    """MindSpore's strategy with drop_mask and the compressed mask: query (dp, mp, sp, 1), key/value (dp, mp, 1, 1)
    (2 key/value heads split as the query's 4), drop_mask (dp, mp, sp, 1), the (2048, 2048) mask (1, 1)."""
    k, v = _kv(2)
    bits = np.packbits(_RNG.random((B, N1, S, S)) < 0.75, axis=-1, bitorder="little")
    args = tuple(ms.Tensor(t) for t in (Q, k, v, bits, TEMPLATE))
    strategy = ((2, 2, 2, 1), (2, 2, 1, 1), (2, 2, 1, 1), (2, 2, 2, 1), (1, 1))
    got, _, graph = forward(_Grouped(strategy), *args)
    np.testing.assert_allclose(got.asnumpy(), reference(_Grouped(None), *args).asnumpy(), rtol=1e-5, atol=1e-6)
    assert graph.find("fa")[0].strategy.in_strategy() == strategy
