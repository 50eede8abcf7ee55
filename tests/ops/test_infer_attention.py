"""MindSpore's inference attention ops (``PromptFlashAttention``, ``IncreFlashAttention``,
``FusedInferAttentionScore``): their math against a plain softmax attention in numpy, their strategies on 8 devices
against one device, and the strategies and inputs they refuse."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import StrategyError
from graphpar.ops import auto_generate as A
from graphpar.ops.operations import nn_ops as P
from graphpar.dump.hlo import parse_collectives
from tests.planner.helpers import forward, kind_strategies

B, N, NKV, S1, S2, D = 2, 4, 2, 8, 8, 4
RNG = np.random.default_rng(0)
Q = RNG.normal(size=(B, N, S1, D)).astype(np.float32)
K = RNG.normal(size=(B, NKV, S2, D)).astype(np.float32)
V = RNG.normal(size=(B, NKV, S2, D)).astype(np.float32)
MASK = RNG.random((B, 1, S1, S2)) < 0.3
QI, KI = np.arange(S1)[:, None], np.arange(S2)[None, :]


def _reference(q, k, v, scale, discard, pse=None):
    """softmax(scale * q k^T + pse) v over the keys ``discard`` keeps, key head h // (N / Nkv) for query head h; a
    row with every key discarded is zero."""
    k, v = (np.repeat(t, q.shape[1] // t.shape[1], axis=1) for t in (k, v))
    s = np.einsum("bnqd,bnkd->bnqk", q, k) * scale + (0 if pse is None else pse)
    drop = np.broadcast_to(discard, s.shape)
    row_max = np.where(drop, -np.inf, s).max(-1, keepdims=True)
    p = np.where(drop, 0.0, np.exp(s - np.where(np.isfinite(row_max), row_max, 0.0)))
    total = p.sum(-1, keepdims=True)
    return np.einsum("bnqk,bnkd->bnqd", p / np.where(total > 0, total, 1), v)


def _bsh(t):  # (B, N, S, D) -> (B, S, N * D)
    return t.transpose(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1)


def _t(*arrays):
    return [None if a is None else ms.Tensor(a) for a in arrays]


@pytest.mark.parametrize("mode,pre,nxt,expected_drop", [
    (0, 2, 1, MASK | (KI - QI < -2) | (KI - QI > 1)),  # the mask and the top-left band
    (1, 2, 1, MASK),  # the full mask alone: pre_tokens / next_tokens unused
    (2, 2, 1, KI > QI),  # causal from the top-left
    (3, 2, 1, KI > QI + S2 - S1),  # causal from the bottom-right
    (4, 2, 1, (KI - QI < -2) | (KI - QI > 1)),  # the band from the bottom-right (S1 == S2: the same corner)
])
def test_prompt_sparse_modes_equal_masked_softmax_attention(mode, pre, nxt, expected_drop):
    """Grouped-query attention (4 query heads on 2 key/value heads); modes 2-4 take the compressed 2048 x 2048
    template as attn_mask, which the mode's band replaces."""
    mask = MASK if mode in (0, 1) else np.ones((1, 1, 2048, 2048), bool)
    op = P.PromptFlashAttention(num_heads=N, scale_value=0.5, pre_tokens=pre, next_tokens=nxt, input_layout="BNSD",
                                num_key_value_heads=NKV, sparse_mode=mode)
    out = op(*_t(Q, K, V, mask)).asnumpy()
    np.testing.assert_allclose(out, _reference(Q, K, V, 0.5, expected_drop), rtol=1e-5, atol=1e-5)


def test_prompt_actual_lengths_and_bsh_layout():
    """``actual_seq_lengths`` (lists of ints or tensors) cut each row's query and keys; rows past the query length
    are zero; right-down causal (mode 3) aligns each row's last query with its last valid key."""
    q_len, kv_len = [8, 5], [8, 6]
    op = P.PromptFlashAttention(num_heads=N, scale_value=0.5, num_key_value_heads=NKV, sparse_mode=3)
    out = op(*_t(_bsh(Q), _bsh(K), _bsh(V)), None, q_len, ms.Tensor(np.array(kv_len))).asnumpy()
    drop = np.stack([(KI > QI + kv - ql) | (KI >= kv) | (QI >= ql) for ql, kv in zip(q_len, kv_len)])[:, None]
    np.testing.assert_allclose(out, _bsh(_reference(Q, K, V, 0.5, drop)), rtol=1e-5, atol=1e-5)
    assert np.all(out[1, 5:] == 0)


def test_incremental_one_token_with_mask_and_cache_lengths():
    q1 = Q[:, :, :1]
    mask = RNG.random((B, 1, S2)) < 0.3  # (B, 1, S2): one of IncreFlashAttention's mask shapes
    op = P.IncreFlashAttention(num_heads=N, input_layout="BNSD", scale_value=0.5, num_key_value_heads=NKV)
    out = op(ms.Tensor(q1), [ms.Tensor(K)], [ms.Tensor(V)], ms.Tensor(mask), ms.Tensor(np.array([8, 3]))).asnumpy()
    drop = mask[:, :, None, :] | (KI[None, None] >= np.array([8, 3])[:, None, None, None])
    np.testing.assert_allclose(out, _reference(q1, K, V, 0.5, drop), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD_BSND"])
def test_fused_prompt_with_pse_shift_and_softmax_lse(layout):
    """``pse_shift`` is added to the scaled scores; ``softmax_lse`` is each row's log-sum-exp, (B, N, S1, 1)."""
    pse = RNG.normal(size=(1, N, S1, S2)).astype(np.float32)
    to = {"BSH": _bsh, "BSND": lambda t: t.transpose(0, 2, 1, 3), "BNSD_BSND": lambda t: t}[layout]
    op = A.FusedInferAttentionScore(num_heads=N, scale_value=0.5, input_layout=layout, num_key_value_heads=NKV,
                                    softmax_lse_flag=True)
    out, lse = op(ms.Tensor(to(Q)), [ms.Tensor(to(K))], [ms.Tensor(to(V))], ms.Tensor(pse))
    expected = _reference(Q, K, V, 0.5, np.zeros((1,), bool), pse)
    out_to = {"BSH": _bsh}.get(layout, lambda t: t.transpose(0, 2, 1, 3))  # BNSD_BSND writes BSND
    np.testing.assert_allclose(out.asnumpy(), out_to(expected), rtol=1e-5, atol=1e-5)
    scores = np.einsum("bnqd,bnkd->bnqk", Q, np.repeat(K, 2, axis=1)) * 0.5 + pse
    np.testing.assert_allclose(lse.asnumpy()[..., 0], np.log(np.exp(scores).sum(-1)), rtol=1e-5)


def test_fused_without_lse_flag_returns_a_stub():
    out, lse = A.FusedInferAttentionScore(num_heads=N, input_layout="BNSD", num_key_value_heads=NKV)(
        ms.Tensor(Q), [ms.Tensor(K)], [ms.Tensor(V)])
    assert lse.shape == (1,) and str(lse.dtype) == "float32" and out.shape == Q.shape


class _Net(nn.Cell):
    """``op(*inputs)`` with the optional inputs given by keyword (None where not given)."""

    def __init__(self, op, **optional):
        super().__init__()
        self.op = op
        self.names = tuple(optional)

    def construct(self, q, k, v, *rest):
        out = self.op(q, k, v, **dict(zip(self.names, rest)))
        return out[0] if isinstance(out, tuple) else out


def _on_8_and_1(net, *inputs, **ctx):
    """(8-device output, its compiled HLO, one device's output) of ``net``'s forward (``ctx``: more settings)."""
    out, hlo, _ = forward(net, *inputs, **ctx)
    ms.reset_auto_parallel_context()
    alone = net(*inputs)
    return np.asarray(out), hlo, np.asarray(alone)


def test_prompt_split_batch_heads_and_query_sequence_equals_one_device():
    """(dp, mp, sp) = (2, 2, 2) with a full mask and a band: the mask's sequence entry follows the query's, the
    actual lengths' (2,) entry is read but they stay whole (MindSpore's tensor map), and the result is one
    device's."""
    op = P.PromptFlashAttention(num_heads=N, scale_value=0.5, pre_tokens=3, next_tokens=0, input_layout="BNSD",
                                num_key_value_heads=NKV)
    op.shard(((2, 2, 2, 1), (2, 2, 1, 1), (2, 2, 1, 1), (2, 1, 2, 1), (2,)))
    net = _Net(op, attn_mask=None, actual_seq_lengths=None)
    inputs = _t(Q, K, V, MASK, np.array([8, 6]))
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    assert kind_strategies(net, *inputs, kind="PromptFlashAttention") == [
        [[2, 2, 2, 1], [2, 2, 1, 1], [2, 2, 1, 1], [2, 1, 2, 1], [1]]]
    out, hlo, alone = _on_8_and_1(net, *inputs)
    np.testing.assert_allclose(out, alone, rtol=1e-5, atol=1e-5)
    # each device's query rows see whole keys and the band is computed from global positions: the one collective
    # gathers the batch-split actual lengths (2 int32s: 8 bytes), which the op keeps whole
    found = parse_collectives(hlo, 8)
    assert [(c.kind, c.nbytes) for c in found] == [("AllGather", 8)], [(c.kind, c.nbytes) for c in found]


def test_fused_incremental_key_sequence_split_equals_one_device():
    """A one-token query with the key/value sequence split 4 ways (MindSpore's IFA split, combined by LSE): the
    softmax's row maximum and sum are reduced across the 4 devices (all-reduces in the compiled HLO) and the
    result is one device's."""
    q1 = ms.Tensor(_bsh(Q[:, :, :1]))
    kv = [ms.Tensor(_bsh(t)) for t in (K, V)]
    op = A.FusedInferAttentionScore(num_heads=N, scale_value=0.5, num_key_value_heads=NKV, softmax_lse_flag=True)
    op.shard(((2, 1, 1), ((2, 4, 1),), ((2, 4, 1),)))
    net = _Net(op)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    assert kind_strategies(net, q1, *kv, kind="FusedInferAttentionScore") == [[[2, 1, 1], [2, 4, 1], [2, 4, 1]]]
    out, hlo, alone = _on_8_and_1(net, q1, *kv)
    np.testing.assert_allclose(out, alone, rtol=1e-5, atol=1e-5)
    assert "all-reduce" in hlo


def test_incremental_split_by_batch_and_heads_equals_one_device():
    op = P.IncreFlashAttention(num_heads=N, scale_value=0.5, num_key_value_heads=NKV)
    op.shard(((2, 1, 2), (2, 1, 2), (2, 1, 2), (2, 1, 1)))
    net = _Net(op, attn_mask=None)
    inputs = _t(_bsh(Q[:, :, :1]), _bsh(K), _bsh(V), RNG.random((B, 1, S2)) < 0.3)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    out, _, alone = _on_8_and_1(net, *inputs)
    np.testing.assert_allclose(out, alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,strategy,inputs,match", [
    (P.PromptFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV),
     ((2, 2, 1, 1), (2, 2, 1, 1), (2, 1, 1, 1)), (Q, K, V), "key is split .* and value"),
    (P.PromptFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV),
     ((2, 1, 1, 2), (2, 1, 1, 1), (2, 1, 1, 1)), (Q, K, V), "query's D dimension is split 2"),
    (P.PromptFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV),
     ((2, 1, 2, 1), (2, 1, 1, 1), (2, 1, 1, 1), (2, 1, 1, 1)), (Q, K, V, MASK), "attn_mask's sequence .* must be 2"),
    (P.PromptFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV),
     ((1, 4, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1)), (Q, K, V), "heads are split 4 ways .* num_key_value_heads 2"),
    (P.IncreFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV),
     ((2, 2, 1, 1), (2, 2, 1, 1), (2, 2, 1, 1), (1, 1, 1, 1)), (Q[:, :, :1], K, V, MASK[:, :, :1]),
     "attn_mask is split .* batch as the query's"),
    (P.IncreFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV),
     ((2, 2, 1, 1), (2, 1, 1, 1), (2, 1, 1, 1)), (Q[:, :, :1], K, V), "query is split .* and key/value"),
    (P.IncreFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV),
     ((2, 2, 1, 1),) * 4, (Q[:, :, :1], K, V, ("antiquant_scale", np.ones((2, NKV, 1, D)))),
     r"antiquant_scale is split \(2, 2, 1, 1\); it splits the key/value heads as the query's \(2\)"),
    (A.FusedInferAttentionScore(N, input_layout="BNSD_BSND", num_key_value_heads=NKV),
     ((2, 1, 1, 1), ((2, 1, 1, 1),), ((2, 1, 1, 1),)), (Q, K, V), "'BNSD_BSND' takes no strategy"),
])
def test_strategies_mindspore_refuses(op, strategy, inputs, match):
    """MindSpore's CheckStrategy refusals, by name: a StrategyError (a RuntimeError, as MindSpore raises). A fourth
    input is attn_mask, or (name, array)."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    extra = [x if isinstance(x, tuple) else ("attn_mask", x) for x in inputs[3:]]
    net = _Net(op.shard(strategy), **{name: None for name, _ in extra})
    with pytest.raises(StrategyError, match=match):
        kind_strategies(net, *_t(*inputs[:3], *(a for _, a in extra)), kind=op.name)


def test_fused_key_entry_must_be_a_tuple_of_entries():
    with pytest.raises(StrategyError, match="the key entry .* one entry per key tensor"):
        A.FusedInferAttentionScore(N).shard(((2, 1, 1), (2, 1, 1), (2, 1, 1)))


def test_unbuilt_inputs_and_settings_are_refused_by_name():
    q1 = ms.Tensor(Q[:, :, :1])
    ifa = P.IncreFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV)
    with pytest.raises(ValueError, match="the input quant_scale2 is given but quantized attention is not built"):
        ifa(q1, [ms.Tensor(K)], [ms.Tensor(V)], quant_scale2=ms.Tensor(np.ones((1,), np.float32)))
    with pytest.raises(StrategyError, match="9 entries.*quant_offset2, block_table.*not built"):
        ifa.shard(((1, 1, 1, 1),) * 9)
    with pytest.raises(ValueError, match="the input block_table is given but page attention is not built"):
        ifa(q1, [ms.Tensor(K)], [ms.Tensor(V)], block_table=ms.Tensor(np.zeros((B, 1), np.int32)))
    with pytest.raises(ValueError, match="key is a list of 2 tensors"):
        ifa(q1, [ms.Tensor(K)] * 2, [ms.Tensor(V)] * 2)
    with pytest.raises(ValueError, match="sparse_mode=5"):
        P.PromptFlashAttention(N, sparse_mode=5)
    with pytest.raises(ValueError, match="block_size=16.*page attention is not built"):
        P.IncreFlashAttention(N, block_size=16)
    with pytest.raises(ValueError, match=r"antiquant_mode=2.*1 \(per token\)"):
        A.FusedInferAttentionScore(N, antiquant_mode=2)
    with pytest.raises(ValueError, match="key_antiquant_mode=1.*separate key/value antiquant are not built"):
        A.FusedInferAttentionScore(N, key_antiquant_mode=1)
    with pytest.raises(ValueError, match="input_layout='TND'"):
        P.PromptFlashAttention(N, input_layout="TND")
    with pytest.raises(ValueError, match="sparse_mode=1 .* needs the full attn_mask"):
        P.PromptFlashAttention(N, input_layout="BNSD", num_key_value_heads=NKV, sparse_mode=1)(*_t(Q, K, V))


def test_fused_ring_attention_splits_key_sequence_as_the_querys():
    """``add_prim_attr("enable_ring_attention", True)`` (MindSpore's FIAS ring attention): the key/value sequence is
    split as the query's, 4 ways, and the result is one device's; without softmax_lse_flag it is refused, as
    MindSpore refuses it."""
    op = A.FusedInferAttentionScore(num_heads=N, scale_value=0.5, input_layout="BNSD", num_key_value_heads=NKV,
                                    softmax_lse_flag=True).add_prim_attr("enable_ring_attention", True)
    op.shard(((2, 1, 4, 1), ((2, 1, 4, 1),), ((2, 1, 4, 1),)))
    inputs = _t(Q, K, V)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    assert kind_strategies(_Net(op), *inputs, kind="FusedInferAttentionScore") == [
        [[2, 1, 4, 1], [2, 1, 4, 1], [2, 1, 4, 1]]]
    out, _, alone = _on_8_and_1(_Net(op), *inputs)
    np.testing.assert_allclose(out, alone, rtol=1e-5, atol=1e-5)
    plain = A.FusedInferAttentionScore(num_heads=N, input_layout="BNSD", num_key_value_heads=NKV)
    plain.add_prim_attr("enable_ring_attention", True).shard(((2, 1, 4, 1), ((2, 1, 4, 1),), ((2, 1, 4, 1),)))
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    with pytest.raises(StrategyError, match="enable_ring_attention is set with softmax_lse_flag=False"):
        kind_strategies(_Net(plain), *inputs, kind="FusedInferAttentionScore")


def test_functional_forms_are_the_primitives():
    """``ops.prompt_flash_attention`` / ``incre_flash_attention`` / ``fused_infer_attention_score`` (FIAS's mask
    spelled ``atten_mask`` and its scale ``scale``, as MindSpore's functional form) call the primitives."""
    q, k, v, mask = _t(Q, K, V, MASK)
    kw = dict(num_heads=N, input_layout="BNSD", num_key_value_heads=NKV)
    expected = _reference(Q, K, V, 0.5, MASK | (KI > QI))
    np.testing.assert_allclose(ops.prompt_flash_attention(q, k, v, mask, scale_value=0.5, **kw).asnumpy(), expected,
                               rtol=1e-5, atol=1e-5)
    out, _ = ops.fused_infer_attention_score(q, [k], [v], atten_mask=mask, scale=0.5, next_tokens=0, **kw)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5, atol=1e-5)
    one = ops.incre_flash_attention(ms.Tensor(Q[:, :, :1]), [k], [v], scale_value=0.5, **kw).asnumpy()
    np.testing.assert_allclose(one, _reference(Q[:, :, :1], K, V, 0.5, np.zeros((1,), bool)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="the input block_table is given but page attention is not built"):
        ops.fused_infer_attention_score(q, [k], [v], block_table=ms.Tensor(np.zeros((B, 1), np.int32)), **kw)


# --- antiquant: an int8 key/value cache ---------------------------------------------------------------------------
KQ = RNG.integers(-127, 128, size=(B, NKV, S2, D)).astype(np.int8)
VQ = RNG.integers(-127, 128, size=(B, NKV, S2, D)).astype(np.int8)
SCALE = RNG.uniform(0.01, 0.02, size=(2, NKV, 1, D)).astype(np.float32)  # per channel, BNSD: (2, kvN, 1, D)
OFFSET = RNG.normal(size=(2, NKV, 1, D)).astype(np.float32)


@pytest.mark.parametrize("layout", ["BNSD", "BSH"])
@pytest.mark.parametrize("per_tensor", [False, True])
def test_incremental_antiquant_dequantizes_the_int8_cache(layout, per_tensor):
    """``antiquant_scale`` / ``antiquant_offset`` row 0 the key's, row 1 the value's: the attention reads
    ``(x + offset) * scale`` (per channel: ``(2, kvN, 1, D)`` in BNSD, ``(2, kvH)`` in BSH; per tensor: ``(2,)``)."""
    scale, offset = (SCALE[:, 0, 0, 0], OFFSET[:, 0, 0, 0]) if per_tensor else (SCALE, OFFSET)
    bcast = (lambda t, r: t[r]) if per_tensor else (lambda t, r: t[r][None])
    k = (KQ + bcast(offset, 0)) * bcast(scale, 0)
    v = (VQ + bcast(offset, 1)) * bcast(scale, 1)
    expected = _reference(Q[:, :, :1], k, v, 0.5, np.zeros((1, 1, 1, S2), bool))
    if layout == "BSH":
        args = (_bsh(Q[:, :, :1]), _bsh(KQ), _bsh(VQ))
        if not per_tensor:  # (2, kvN, 1, D) -> (2, kvH)
            scale, offset = (t.reshape(2, NKV * D) for t in (scale, offset))
        expected = _bsh(expected)
    else:
        args = (Q[:, :, :1], KQ, VQ)
    op = P.IncreFlashAttention(num_heads=N, input_layout=layout, scale_value=0.5, num_key_value_heads=NKV)
    q, k8, v8 = _t(*args)
    out = op(q, [k8], [v8], antiquant_scale=ms.Tensor(scale), antiquant_offset=ms.Tensor(offset)).asnumpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    symmetric = op(q, [k8], [v8], antiquant_scale=ms.Tensor(scale)).asnumpy()  # no offset: symmetric
    k0, v0 = KQ * bcast(scale if layout == "BNSD" or per_tensor else SCALE, 0), VQ * bcast(
        scale if layout == "BNSD" or per_tensor else SCALE, 1)
    expected0 = _reference(Q[:, :, :1], k0, v0, 0.5, np.zeros((1, 1, 1, S2), bool))
    np.testing.assert_allclose(symmetric, _bsh(expected0) if layout == "BSH" else expected0, rtol=1e-5, atol=1e-5)


def test_fused_prompt_antiquant_dequantizes_the_int8_cache():
    op = A.FusedInferAttentionScore(num_heads=N, scale_value=0.5, input_layout="BNSD", num_key_value_heads=NKV)
    out, _ = op(*_t(Q), [ms.Tensor(KQ)], [ms.Tensor(VQ)], antiquant_scale=ms.Tensor(SCALE),
                antiquant_offset=ms.Tensor(OFFSET))
    k, v = ((t + OFFSET[r][None]) * SCALE[r][None] for r, t in enumerate((KQ, VQ)))
    np.testing.assert_allclose(out.asnumpy(), _reference(Q, k, v, 0.5, np.zeros((1, 1, S1, S2), bool)),
                               rtol=1e-5, atol=1e-5)


def test_incremental_antiquant_split_by_heads_equals_one_device():
    """MindSpore's IncreFlashAttentionInfo: the antiquant entries split the key/value heads as the query's
    (``(1, mp, 1, 1)``); on 8 devices the dequantized attention is one device's."""
    op = P.IncreFlashAttention(num_heads=N, input_layout="BNSD", scale_value=0.5, num_key_value_heads=NKV)
    op.shard(((4, 2, 1, 1),) * 3 + ((1, 2, 1, 1),) * 2)
    net = _Net(op, antiquant_scale=None, antiquant_offset=None)
    inputs = _t(Q[:, :, :1], np.concatenate([KQ] * 2), np.concatenate([VQ] * 2), SCALE, OFFSET)
    inputs[0] = ms.Tensor(np.concatenate([Q[:, :, :1]] * 2))
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, dataset_strategy="full_batch")
    assert kind_strategies(net, *inputs, kind="IncreFlashAttention") == [
        [[4, 2, 1, 1], [4, 2, 1, 1], [4, 2, 1, 1], [1, 2, 1, 1], [1, 2, 1, 1]]]
    out, hlo, alone = _on_8_and_1(net, *inputs, dataset_strategy="full_batch")
    np.testing.assert_allclose(out, alone, rtol=1e-5, atol=1e-5)
    # whole inputs (full_batch): every device slices its batch rows, heads and heads' scales; nothing moves
    assert parse_collectives(hlo, 8) == []


def test_antiquant_on_a_float_cache_is_unused_and_bad_shapes_are_refused():
    """MindSpore's kernel dequantizes an int8 cache only: with a float key/value the antiquant inputs are unused
    (said once); an int8 cache with scales of another shape, or an offset without a scale, is refused by name."""
    op = P.IncreFlashAttention(num_heads=N, input_layout="BNSD", num_key_value_heads=NKV)
    q, k, v = _t(Q[:, :, :1], K, V)
    plain = op(q, [k], [v]).asnumpy()
    np.testing.assert_array_equal(op(q, [k], [v], antiquant_scale=ms.Tensor(SCALE)).asnumpy(), plain)
    with pytest.raises(ValueError, match=r"antiquant_scale \(2, 4, 1, 4\) is not per tensor or per channel: valid "
                       r"\(2,\) or \(2, 2, 1, 4\)"):
        op(q, [ms.Tensor(KQ)], [ms.Tensor(VQ)], antiquant_scale=ms.Tensor(np.ones((2, N, 1, D), np.float32)))
    with pytest.raises(ValueError, match="antiquant_offset is given without antiquant_scale"):
        op(q, [ms.Tensor(KQ)], [ms.Tensor(VQ)], antiquant_offset=ms.Tensor(OFFSET))


def test_fused_incremental_per_token_antiquant_with_the_key_sequence_split_equals_one_device():
    """``antiquant_mode=1``: one scale and offset per batch row and cache position, ``(2, B, S)``; with the key/value
    sequence split 4 ways (MindSpore's incremental FIAS split) they split as the key's, and the result is numpy's
    and one device's."""
    scale = RNG.uniform(0.01, 0.02, size=(2, B, S2)).astype(np.float32)
    offset = RNG.normal(size=(2, B, S2)).astype(np.float32)
    k, v = ((t + offset[r][:, None, :, None]) * scale[r][:, None, :, None] for r, t in enumerate((KQ, VQ)))
    expected = _bsh(_reference(Q[:, :, :1], k, v, 0.5, np.zeros((1, 1, 1, S2), bool)))
    op = A.FusedInferAttentionScore(num_heads=N, scale_value=0.5, num_key_value_heads=NKV, antiquant_mode=1)
    inputs = _t(_bsh(Q[:, :, :1]), _bsh(KQ), _bsh(VQ), scale, offset)
    alone = _Net(op, antiquant_scale=None, antiquant_offset=None)(*inputs).asnumpy()
    np.testing.assert_allclose(alone, expected, rtol=1e-5, atol=1e-5)
    op.shard(((2, 1, 1), ((2, 4, 1),), ((2, 4, 1),), (1, 2, 4), (1, 2, 4)))
    net = _Net(op, antiquant_scale=None, antiquant_offset=None)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    assert kind_strategies(net, *inputs, kind="FusedInferAttentionScore") == [
        [[2, 1, 1], [2, 4, 1], [2, 4, 1], [1, 2, 4], [1, 2, 4]]]
    out, _, _ = _on_8_and_1(net, *inputs)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
