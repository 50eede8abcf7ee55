"""``FlashAttentionScore``: MindSpore's fused attention, computed block by block with an online softmax, and its
context-parallel (ring attention) form.

Why blockwise. MindSpore's kernel never materializes the ``(S1, S2)`` score matrix: it walks the keys in blocks,
keeping per query row the running maximum and sum of the softmax (its ``softmax_max`` and ``softmax_sum`` outputs),
and its backward recomputes the blocks. Here the blocks are a ``lax.scan`` whose step is ``jax.checkpoint``-ed, so
the backward keeps only each step's running ``(out, max, sum)`` and recomputes the scores inside the loop, where no
XLA scheduler can hoist them: the attention's saved activations are O(S * D) instead of O(S1 * S2).

Context parallel (MindSpore's ``context_parallel_algo="colossalai_cp"``, ring attention) is selected by the
strategy: when ``shard()`` splits the sequence dimension of the query and of the key/value ``cp`` ways, the local
sequence is taken as ``cp`` ring blocks (the dimension reshaped to ``(cp, S / cp)``, so each device holds one) and
the key/value blocks are rotated one block per ring step (two zero-padded shifts of the block dimension, which XLA's
SPMD partitioner compiles to collective-permutes within each cp group: ``_rotate``); each step's causal band is
worked out from the blocks' global positions. Ulysses (``"ulysses_cp"``) needs nothing here: the op's heads dimension
is split instead, and the redistribution from the sequence-split inputs is XLA's all-to-all.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from graphpar.errors import StrategyError
from graphpar.ops.infer_attention_math import band, from_bnsd, sparse_discard, to_bnsd
from graphpar.ops.primitive import Primitive
from graphpar.planner.layout import Layout

_NO_BAND = 2147483647  # MindSpore's default pre_tokens / next_tokens: no limit
_CHUNK = 128  # keys per scan step: the largest transient score block is (..., S1 / cp, _CHUNK)
_MASKED = -1e30  # a finite "minus infinity" (computed in float32): a fully masked chunk keeps the running max finite
_OPTIONAL_INPUTS = ("real_shift", "drop_mask", "padding_mask", "attn_mask", "prefix", "actual_seq_qlen",
                    "actual_seq_kvlen")
_BUILT_INPUTS = ("real_shift", "drop_mask", "attn_mask")
_WHY_NOT = {"padding_mask": "MindSpore reserves it (not built)",
            "prefix": "the prefix sparse modes are not built",
            "actual_seq_qlen": "the variable-length layout TND is not built",
            "actual_seq_kvlen": "the variable-length layout TND is not built"}
_SEQ_DIM = {"BSH": 1, "SBH": 0, "BNSD": 2, "BSND": 1}  # the sequence dimension of query / key / value
_HEAD_DIM = {"BNSD": 1, "BSND": 2}
_COMPRESSED_MASK = 2048  # sparse modes 2-4 take the kernel's (2048, 2048) lower-triangular template as attn_mask


class FlashAttentionScore(Primitive):
    """``FlashAttentionScore(head_num, keep_prob=1.0, scale_value=1.0, pre_tokens=2147483647,
    next_tokens=2147483647, inner_precise=0, input_layout="BSH", sparse_mode=0)(query, key, value,
    real_shift=None, drop_mask=None, padding_mask=None, attn_mask=None, prefix=None, actual_seq_qlen=None,
    actual_seq_kvlen=None)`` → ``(softmax_max, softmax_sum, softmax_out, attention_out)``.

    Layouts ``BSH`` (query ``(B, S1, N1 * D)``), ``SBH``, ``BNSD`` and ``BSND``; key/value may hold fewer heads
    ``N2`` dividing ``N1`` (grouped-query attention: query head ``h`` reads key head ``h // (N1 / N2)``).
    ``attention_out = softmax(mask(scale * (real_shift + q k^T))) v`` (MindSpore's order: the shift is added before
    the scale). Discarded keys: ``attn_mask`` (non-zero discards; ``(B, N1 or 1, S1, S2)`` or ``(S1, S2)``) and the
    band of ``sparse_mode``: 0 ``q - pre_tokens <= k <= q + next_tokens`` (``next_tokens=0``: causal), 1 none
    (the full mask decides), 2 causal from the top-left, 3 causal from the bottom-right, 4 the ``pre_tokens`` /
    ``next_tokens`` band from the bottom-right; modes 2-4 take the kernel's compressed ``(2048, 2048)`` template as
    ``attn_mask``, which the band replaces. ``real_shift`` is ``(B or 1, N1, S1, S2)``.
    ``softmax_max`` / ``softmax_sum`` are ``(B, N1, S1, 8)`` float32 (the value repeated 8 times, as the kernel
    writes them); ``softmax_out`` is reserved (MindSpore's too) and empty.

    Without ``real_shift`` / ``attn_mask``, ``sparse_mode`` 0 and equal heads, the computation is blockwise (the
    module's docstring) and a strategy splitting the key/value sequence as the query's is ring attention; with them
    it is one masked softmax per device, and the key/value sequence stays whole. Dropout (``keep_prob < 1``) reads
    ``drop_mask``, the packed bits of ``DropoutGenMask`` for ``(B, N1, S1, S2)``: a weight is kept where its bit is
    set and scaled by ``1 / keep_prob``. Refused by name: ``TND``, ``padding_mask``, ``prefix``, ``actual_seq_qlen`` /
    ``actual_seq_kvlen`` and sparse modes 5-8 (prefix and varlen modes).
    """

    input_names = ("query", "key", "value") + _OPTIONAL_INPUTS
    optional_inputs = len(_OPTIONAL_INPUTS)

    def __init__(self, head_num: int, keep_prob: float = 1.0, scale_value: float = 1.0, pre_tokens: int = _NO_BAND,
                 next_tokens: int = _NO_BAND, inner_precise: int = 0, input_layout: str = "BSH",
                 sparse_mode: int = 0):
        if input_layout not in _SEQ_DIM:
            raise ValueError(f"FlashAttentionScore(input_layout={input_layout!r}): graphpar supports "
                             f"{', '.join(map(repr, _SEQ_DIM))} (MindSpore's TND, variable-length, is not built)")
        if not 0.0 < float(keep_prob) <= 1.0:
            raise ValueError(f"FlashAttentionScore(keep_prob={keep_prob!r}): valid: 0 < keep_prob <= 1 (the "
                             f"probability of keeping a softmax weight)")
        if sparse_mode not in (0, 1, 2, 3, 4):
            raise ValueError(f"FlashAttentionScore(sparse_mode={sparse_mode!r}): valid modes are 0 (mask and band), "
                             f"1 (full mask), 2 (causal, top-left), 3 (causal, bottom-right), 4 (band, bottom-right); "
                             f"the prefix and variable-length modes 5-8 are not built")
        super().__init__(head_num=int(head_num), keep_prob=float(keep_prob), scale_value=float(scale_value),
                         pre_tokens=int(pre_tokens), next_tokens=int(next_tokens), inner_precise=inner_precise,
                         input_layout=input_layout, sparse_mode=sparse_mode)

    def __call__(self, query, key, value, *optional: Any):
        for name, given in zip(_OPTIONAL_INPUTS, optional):
            if given is not None and name not in _BUILT_INPUTS:
                raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): the input {name} is given but "
                                 f"{_WHY_NOT[name]}; pass None (built: real_shift, drop_mask, attn_mask)")
        return super().__call__(query, key, value, *optional)

    def ring_size(self) -> int:
        """How many ring blocks the strategy asks for: the split of the query's sequence dimension when the
        key/value sequence is split as the query's; 1 when it is whole (each device's query rows attend to every
        key: MindSpore's sequence parallelism, no ring)."""
        if self.in_strategy is None or isinstance(self.in_strategy, tuple) and len(self.in_strategy) < 3:
            return 1
        seq_dim = _SEQ_DIM[self.attrs["input_layout"]]
        q_split, k_split, v_split = (_split(t, seq_dim) for t in self.in_strategy[:3])
        if k_split == v_split == 1:
            return 1
        if not q_split == k_split == v_split:
            raise StrategyError(self.instance_name, self.in_strategy, f"the key and value sequence dimension must be "
                                f"split as the query's ({q_split}: ring attention holds key/value block i with query "
                                f"block i; or 1: whole, each device's query rows against every key)",
                                hint="Split dimension S of key and value as the query's, or not at all")
        return q_split

    def compute(self, query, key, value, real_shift=None, drop_mask=None, padding_mask=None, attn_mask=None,
                prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None):
        a = self.attrs
        layout = a["input_layout"]
        n1 = a["head_num"]
        q = _to_bnsd(query, layout, n1)
        d = q.shape[3]
        n2 = key.shape[-1] // d if layout in ("BSH", "SBH") else key.shape[_HEAD_DIM[layout]]  # H = N2 * D
        k = _to_bnsd(key, layout, max(n2, 1))
        v = _to_bnsd(value, layout, max(n2, 1))
        if n2 < 1 or n1 % n2 or k.shape[3] != d or v.shape[:3] != k.shape[:3] or k.shape[0] != q.shape[0]:
            raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): query {tuple(query.shape)}, key "
                             f"{tuple(key.shape)} and value {tuple(value.shape)} in layout {layout} do not hold "
                             f"head_num={n1} query heads and key/value heads dividing them, of one head size")
        masked = real_shift is not None or attn_mask is not None or a["sparse_mode"] != 0 or a["keep_prob"] < 1
        if not masked and k.shape[1] == n1 and v.shape[3] == d:
            out, m, l = ring_attention(q, k, v, a["scale_value"], a["pre_tokens"], a["next_tokens"],
                                       self.ring_size())
        else:
            if self.ring_size() > 1:
                raise StrategyError(self.instance_name, self.in_strategy, "ring attention (the key/value sequence "
                                    "split as the query's) is built without real_shift, attn_mask, dropout, sparse "
                                    "modes 1-4 and grouped key/value heads",
                                    hint="Keep the key/value sequence whole (1)")
            out, m, l = masked_attention(q, k, v, a["scale_value"], self._discard(attn_mask, q, k),
                                         self._shift(real_shift, q, k), self._keep(drop_mask, q, k))
        stats = (jnp.broadcast_to(m[..., None], (*m.shape, 8)), jnp.broadcast_to(l[..., None], (*l.shape, 8)))
        return stats[0], stats[1], jnp.zeros((0,), query.dtype), _from_bnsd(out, layout).astype(query.dtype)

    def _discard(self, attn_mask, q, k) -> list:
        """The boolean ``(.., S1, S2)`` arrays of discarded keys: ``attn_mask`` (modes 0, 1) and the band."""
        a = self.attrs
        (b, n1, s1, _), s2 = q.shape, k.shape[2]
        mode = a["sparse_mode"]
        discard = []
        if attn_mask is not None and mode in (0, 1):
            m = jnp.asarray(attn_mask) != 0
            m = m[None, None] if m.ndim == 2 else m
            if m.ndim != 4 or m.shape[0] not in (1, b) or m.shape[1] not in (1, n1) or m.shape[2:] != (s1, s2):
                raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): attn_mask {tuple(attn_mask.shape)} "
                                 f"is not one of MindSpore's shapes for B={b}, N1={n1}, S1={s1}, S2={s2}: (B, N1, "
                                 f"S1, S2), (B, 1, S1, S2), (S1, S2)")
            discard.append(m)
        elif attn_mask is not None and tuple(attn_mask.shape) != (_COMPRESSED_MASK,) * 2:
            raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): sparse_mode={mode} takes the compressed "
                             f"({_COMPRESSED_MASK}, {_COMPRESSED_MASK}) attn_mask, got {tuple(attn_mask.shape)}")
        if mode == 1 and attn_mask is None:
            raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): sparse_mode=1 (allMask) needs the full "
                             f"attn_mask (S1, S2); give it, or use sparse_mode=0")
        if mode == 0:
            discard.append(band(s1, s2, a["pre_tokens"], a["next_tokens"]))
        else:
            extra = sparse_discard(mode, s1, s2, a["pre_tokens"], a["next_tokens"], True, None, None)
            if extra is not None:
                discard.append(extra)
        return discard

    def _keep(self, drop_mask, q, k):
        """Dropout of the softmax weights: ``drop_mask``'s bits (``(B, N1, S1, S2 / 8)`` uint8, bit ``i % 8`` of
        byte ``i // 8``, little-endian, as ``DropoutGenMask`` packs them) keep a weight where set, the kept ones
        scaled by ``1 / keep_prob``. ``None``: keep_prob is 1."""
        keep_prob = self.attrs["keep_prob"]
        if keep_prob == 1.0:
            return None
        (b, n1, s1, _), s2 = q.shape, k.shape[2]
        if drop_mask is None or tuple(drop_mask.shape) != (b, n1, s1, -(-s2 // 8)):
            got = "none" if drop_mask is None else tuple(drop_mask.shape)
            raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): keep_prob={keep_prob} takes the dropout "
                             f"bits drop_mask of shape ({b}, {n1}, {s1}, {-(-s2 // 8)}) uint8 (DropoutGenMask of "
                             f"({b}, {n1}, {s1}, {s2}), reshaped); got {got}")
        bits = jnp.unpackbits(jnp.asarray(drop_mask, jnp.uint8), axis=-1, bitorder="little")[..., :s2]
        return bits.astype(jnp.float32) / jnp.float32(keep_prob)

    def _shift(self, real_shift, q, k):
        (b, n1, s1, _), s2 = q.shape, k.shape[2]
        if real_shift is None:
            return None
        if real_shift.ndim != 4 or real_shift.shape[0] not in (1, b) or tuple(real_shift.shape[1:]) != (n1, s1, s2):
            raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): real_shift {tuple(real_shift.shape)} "
                             f"must be ({b} or 1, {n1}, {s1}, {s2})")
        return real_shift


def flash_attention_score(query: Any, key: Any, value: Any, head_num: int, real_shift=None, drop_mask=None,
                          padding_mask=None, attn_mask=None, prefix=None, actual_seq_qlen=None,
                          actual_seq_kvlen=None, keep_prob=1.0, scalar_value=1.0, pre_tokens=_NO_BAND,
                          next_tokens=_NO_BAND, inner_precise=0, input_layout="BSH", sparse_mode=0):
    """``mindspore.ops.flash_attention_score``: the ``attention_out`` of :class:`FlashAttentionScore` (the scale is
    ``scalar_value``, MindSpore's spelling), with its refusals."""
    op = FlashAttentionScore(head_num, keep_prob, scalar_value, pre_tokens, next_tokens, inner_precise, input_layout,
                             sparse_mode)
    return op(query, key, value, real_shift, drop_mask, padding_mask, attn_mask, prefix, actual_seq_qlen,
              actual_seq_kvlen)[3]


def _to_bnsd(t: jax.Array, layout: str, heads: int) -> jax.Array:
    """``t`` in ``layout`` as ``(B, N, S, D)``; SBH is BSH with batch and sequence swapped."""
    return to_bnsd(jnp.swapaxes(t, 0, 1), "BSH", heads) if layout == "SBH" else to_bnsd(t, layout, heads)


def _from_bnsd(t: jax.Array, layout: str) -> jax.Array:
    return jnp.swapaxes(from_bnsd(t, "BSH"), 0, 1) if layout == "SBH" else from_bnsd(t, layout)


def masked_attention(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, discard: list[jax.Array],
                     shift: jax.Array | None, keep: jax.Array | None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(out, row max, row sum)`` of ``dropout(softmax(scale * (shift + q k^T))) v`` over the keys no entry of
    ``discard`` marks (``keep``: the dropout's kept weights times ``1 / keep_prob``, or None), in float32, for q
    ``(B, N1, S1, D)`` and k, v ``(B, N2, S2, D)`` (query head ``h`` reads key/value head ``h // (N1 / N2)``). One
    score block per device: the masks are whole ``(S1, S2)`` arrays already, so the blockwise scan would save
    nothing they do not hold. A fully discarded row is zero (its max the masked value)."""
    b, n1, s1, d = q.shape
    n2, s2 = k.shape[1], k.shape[2]
    q, k, v = (t.astype(jnp.float32) for t in (q, k, v))
    grouped = q.reshape(b, n2, n1 // n2, s1, d)
    scores = jnp.einsum("bhgqd,bhkd->bhgqk", grouped, k).reshape(b, n1, s1, s2)
    if shift is not None:
        scores = scores + shift.astype(jnp.float32)
    scores = scores * jnp.float32(scale)
    drop = jnp.zeros((), bool)
    for mask in discard:
        drop = drop | mask
    scores = jnp.where(drop, _MASKED, scores)
    row_max = jnp.max(scores, axis=-1)
    p = jnp.where(drop, 0.0, jnp.exp(scores - row_max[..., None]))
    total = jnp.sum(p, axis=-1)
    weights = p / jnp.where(total > 0, total, 1.0)[..., None]
    weights = (weights if keep is None else weights * keep).reshape(b, n2, n1 // n2, s1, s2)
    out = jnp.einsum("bhgqk,bhkd->bhgqd", weights, v).reshape(b, n1, s1, v.shape[3])
    return out, row_max, total


def _split(strategy: Any, dim: int) -> int:
    """How many pieces one input's strategy (a tuple of ints or a called ``Layout``) cuts dimension ``dim`` into."""
    if isinstance(strategy, Layout):
        return math.prod(strategy.size(alias) for alias in strategy.entries[dim])
    return strategy[dim]


def _rotate(blocks: jax.Array) -> jax.Array:
    """Block i moves to position i + 1 (the last to 0) along dimension 2, as the sum of two zero-padded shifts
    (blocks 0..r-2 padded one block up, block r-1 padded to position 0). XLA partitions a pad of a split dimension
    as halo exchanges, so a step sends one block to the next device (collective-permutes); a concatenate (what
    ``jnp.roll`` is) it may instead move onto another dimension and back (all-to-alls) when one is unsplit."""
    ring = blocks.shape[2]
    zero = jnp.zeros((), blocks.dtype)
    pads = [(0, 0, 0)] * blocks.ndim
    shifted = lax.pad(lax.slice_in_dim(blocks, 0, ring - 1, axis=2), zero,
                      [*pads[:2], (1, 0, 0), *pads[3:]])
    wrapped = lax.pad(lax.slice_in_dim(blocks, ring - 1, ring, axis=2), zero,
                      [*pads[:2], (0, ring - 1, 0), *pads[3:]])
    return shifted + wrapped


def ring_attention(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, pre_tokens: int, next_tokens: int,
                   ring: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(out, row max, row sum)`` of the banded softmax attention of q ``(B, N, S1, D)`` over k, v ``(B, N, S2,
    D)``, with ``ring`` blocks along the sequence rotated one block per step (see the module's docstring)."""
    b, n, s1, d = q.shape
    s2 = k.shape[2]
    if s1 % ring or s2 % ring:
        raise ValueError(f"FlashAttentionScore: sequence lengths {s1} and {s2} must divide by the ring size {ring}")
    sq, sk = s1 // ring, s2 // ring
    pre_tokens, next_tokens = min(pre_tokens, s1 + s2), min(next_tokens, s1 + s2)  # no int32 overflow below
    chunk = max(c for c in range(1, min(sk, _CHUNK) + 1) if sk % c == 0)
    chunk = chunk if chunk >= 16 else sk  # a length with no divisor in 16..128 is one chunk, not a long scan
    q, k, v = (t.astype(jnp.float32) for t in (q, k, v))  # the softmax's statistics in float32, as the kernel keeps

    def blocks(t: jax.Array, size: int) -> jax.Array:  # the sequence as (ring, size): dimension 2, a block per device
        return t.reshape(b, n, ring, size, d)

    qb = blocks(q, sq) * jnp.asarray(scale, q.dtype)
    q_pos = (jnp.arange(ring)[:, None] * sq + jnp.arange(sq)[None, :])[:, :, None]  # (ring, sq, 1)

    def chunk_step(carry, c, k_blocks, v_blocks, k_first):
        out, m, l = carry
        kc = lax.dynamic_slice_in_dim(k_blocks, c * chunk, chunk, axis=3)
        vc = lax.dynamic_slice_in_dim(v_blocks, c * chunk, chunk, axis=3)
        k_pos = (k_first[:, None] + c * chunk + jnp.arange(chunk)[None, :])[:, None, :]  # (ring, 1, chunk)
        seen = (k_pos >= q_pos - pre_tokens) & (k_pos <= q_pos + next_tokens)
        s = jnp.where(seen, jnp.einsum("bnrqd,bnrkd->bnrqk", qb, kc), _MASKED)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        p = jnp.where(seen, jnp.exp(s - m_new[..., None]), 0.0)
        alpha = jnp.exp(m - m_new)
        l = l * alpha + jnp.sum(p, axis=-1)
        out = out * alpha[..., None] + jnp.einsum("bnrqk,bnrkd->bnrqd", p, vc)
        return (out, m_new, l), None

    out, m, l = jnp.zeros_like(qb), jnp.full((b, n, ring, sq), _MASKED), jnp.zeros((b, n, ring, sq))
    k_blocks, v_blocks = blocks(k, sk), blocks(v, sk)
    for step in range(ring):  # ring is the cp size (a few): unrolled, so the last step sends nothing
        if step:  # pass the key/value blocks one device along the ring: a collective-permute over the cp group
            k_blocks, v_blocks = _rotate(k_blocks), _rotate(v_blocks)
        k_first = ((jnp.arange(ring) - step) % ring) * sk  # the first key position of the block each device holds
        body = jax.checkpoint(lambda c_, c, kb=k_blocks, vb=v_blocks, kf=k_first: chunk_step(c_, c, kb, vb, kf))
        (out, m, l), _ = lax.scan(body, (out, m, l), jnp.arange(sk // chunk))
    out = out / l[..., None]
    return out.reshape(b, n, s1, d), m.reshape(b, n, s1), l.reshape(b, n, s1)
