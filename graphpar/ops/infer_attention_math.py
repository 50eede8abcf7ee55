"""The math MindSpore's inference attention ops share (``PromptFlashAttention``, ``IncreFlashAttention``,
``FusedInferAttentionScore``): layouts to and from BNSD, the discard mask their arguments describe, and one masked
softmax attention with grouped key/value heads.

Why one dense softmax. The inference ops attend a query block to a key/value cache once (no backward, no ring), so
the scores are computed whole in float32 and XLA's SPMD partitioner splits them as the operands are split: a split
query sequence (MindSpore's ``sp``) keeps each device's rows, a split key/value sequence (the incremental case)
becomes partial row maxima and sums combined across devices, which is what MindSpore's hand-written LSE combine does.
Every mask is computed from global positions, so no per-device re-derivation of ``pre_tokens`` / ``next_tokens``
(MindSpore's ``GetAttenionMaskAttrs``) is needed.

Masking. A key is discarded for a query row when ``attn_mask`` says so (non-zero / True = discard, MindSpore's
convention), when it lies outside the band of ``sparse_mode`` / ``pre_tokens`` / ``next_tokens``, or past the batch
row's ``actual_seq_lengths_kv``; a whole row is discarded past ``actual_seq_lengths``. A row with every key discarded
outputs zeros (the kernel's row-invalidity correction, ``inner_precise`` 2 and 3; graphpar always applies it) and
its log-sum-exp is ``-inf``.

Antiquant (MindSpore's pseudo-quantization of an int8 key/value cache): ``antiquant_scale`` and
``antiquant_offset`` hold two rows, the key's and the value's, each per tensor (a scalar) or per channel (the
key/value heads and head size, in the layout's shape) or per token (``(2, B, S)``, each batch row's cache positions:
``FusedInferAttentionScore``'s ``antiquant_mode=1``); the attention reads ``(x + offset) * scale`` in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NO_BAND = 2147483647  # MindSpore's default pre_tokens / next_tokens: no limit
_MASKED = -1e30  # a finite "minus infinity" in float32: a fully discarded row keeps a finite maximum
LAYOUTS = ("BSH", "BNSD", "BSND")


def antiquant_channel_shape(layout: str, kv_heads: int, head_dim: int) -> tuple[int, ...]:
    """One row of a per-channel ``antiquant_scale`` / ``antiquant_offset`` in ``layout`` (MindSpore's
    ``(2, kvH)`` / ``(2, kvN, 1, D)`` / ``(2, kvN, D)`` without the leading 2)."""
    if layout == "BSH":
        return (kv_heads * head_dim,)
    if layout == "BSND":
        return (kv_heads, head_dim)
    return (kv_heads, 1, head_dim)


def dequantize(x: jax.Array, scale: jax.Array, offset: jax.Array | None, row: int, layout: str,
               per_token: bool) -> jax.Array:
    """``(x + offset[row]) * scale[row]`` in float32 (row 0: the key's parameters, 1: the value's) for ``x`` in
    ``layout``; no offset is symmetric quantization. A per-token row ``(B, S)`` is spread over heads and head size."""
    def row_of(t: jax.Array) -> jax.Array:
        r = t[row].astype(jnp.float32)
        if not per_token:
            return r
        return r[:, :, None] if layout == "BSH" else r[:, :, None, None] if layout == "BSND" else r[:, None, :, None]

    shifted = x.astype(jnp.float32)
    if offset is not None:
        shifted = shifted + row_of(offset)
    return shifted * row_of(scale)


def to_bnsd(t: jax.Array, layout: str, heads: int) -> jax.Array:
    """``t`` in ``layout`` as ``(B, N, S, D)`` (BSH's hidden dimension is ``heads * D``)."""
    if layout == "BSH":
        return jnp.swapaxes(t.reshape(t.shape[0], t.shape[1], heads, -1), 1, 2)
    if layout == "BSND":
        return jnp.swapaxes(t, 1, 2)
    return t


def from_bnsd(t: jax.Array, layout: str) -> jax.Array:
    """The inverse of :func:`to_bnsd` (``BNSD_BSND``'s output is BSND)."""
    if layout == "BSH":
        return jnp.swapaxes(t, 1, 2).reshape(t.shape[0], t.shape[2], -1)
    if layout in ("BSND", "BNSD_BSND"):
        return jnp.swapaxes(t, 1, 2)
    return t


def band(s1: int, s2: int, pre_tokens: int, next_tokens: int, shift: jax.Array | int = 0) -> jax.Array:
    """True where key ``k`` is outside ``q + shift - pre_tokens <= k <= q + shift + next_tokens``: ``(S1, S2)``, or
    ``(B, 1, S1, S2)`` with a per-batch ``shift`` (the right-down alignment of each row's actual lengths)."""
    pre_tokens, next_tokens = min(pre_tokens, s1 + s2), min(next_tokens, s1 + s2)  # no int32 overflow below
    q = jnp.arange(s1)[:, None]
    k = jnp.arange(s2)[None, :]
    if not isinstance(shift, int):
        shift = shift.astype(jnp.int32)[:, None, None, None]
    rel = k - q - shift
    return (rel < -pre_tokens) | (rel > next_tokens)


def sparse_discard(mode: int, s1: int, s2: int, pre_tokens: int, next_tokens: int, has_mask: bool,
                   q_len: jax.Array | None, kv_len: jax.Array | None) -> jax.Array | None:
    """The band ``sparse_mode`` discards (``None``: no band). 0: ``pre_tokens`` / ``next_tokens`` from the top-left
    corner, only with an ``attn_mask`` (without one MindSpore ignores both); 1: none (the full mask decides);
    2: causal from the top-left; 3: causal from the bottom-right; 4: the ``pre_tokens`` / ``next_tokens`` band from
    the bottom-right. Bottom-right means each batch row's actual lengths (``kv_len - q_len``)."""
    if mode == 0:
        return band(s1, s2, pre_tokens, next_tokens) if has_mask else None
    if mode == 1:
        return None
    if mode == 2:
        return band(s1, s2, NO_BAND, 0)
    shift: jax.Array | int = s2 - s1
    if q_len is not None or kv_len is not None:
        ql = jnp.full((1,), s1) if q_len is None else q_len
        kl = jnp.full((1,), s2) if kv_len is None else kv_len
        shift = kl.astype(jnp.int32) - ql.astype(jnp.int32)
    if mode == 3:
        return band(s1, s2, NO_BAND, 0, shift)
    return band(s1, s2, pre_tokens, next_tokens, shift)


def length_discard(s1: int, s2: int, q_len: jax.Array | None, kv_len: jax.Array | None) -> jax.Array | None:
    """``(B, 1, S1, S2)``: True for keys past ``kv_len`` and for whole rows past ``q_len`` (``None``: neither)."""
    out = None
    if kv_len is not None:
        out = (jnp.arange(s2)[None, :] >= kv_len.astype(jnp.int32)[:, None])[:, None, None, :]
    if q_len is not None:
        rows = (jnp.arange(s1)[None, :] >= q_len.astype(jnp.int32)[:, None])[:, None, :, None]
        out = rows if out is None else out | rows
    return out


def attend(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, discard: list[jax.Array],
           pse_shift: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """``(out (B, N, S1, D), lse (B, N, S1))``: softmax(scale * q k^T + pse_shift) v over the keys no entry of
    ``discard`` (each broadcastable to ``(B, N, S1, S2)``) marks, in float32. Key/value with ``Nkv`` heads serve
    ``N / Nkv`` query heads each (grouped-query attention): query head ``h`` reads key head ``h // (N / Nkv)``."""
    b, n, s1, d = q.shape
    nkv = k.shape[1]
    q, k, v = (t.astype(jnp.float32) for t in (q, k, v))
    grouped = q.reshape(b, nkv, n // nkv, s1, d)  # the query heads of one key/value head side by side
    scores = jnp.einsum("bhgqd,bhkd->bhgqk", grouped, k).reshape(b, n, s1, k.shape[2]) * jnp.float32(scale)
    if pse_shift is not None:
        scores = scores + pse_shift.astype(jnp.float32)
    drop = jnp.zeros((), bool)
    for mask in discard:
        drop = drop | mask
    scores = jnp.where(drop, _MASKED, scores)
    row_max = jnp.max(scores, axis=-1, keepdims=True)
    p = jnp.where(drop, 0.0, jnp.exp(scores - row_max))
    total = jnp.sum(p, axis=-1, keepdims=True)
    weights = (p / jnp.where(total > 0, total, 1.0)).reshape(b, nkv, n // nkv, s1, k.shape[2])
    out = jnp.einsum("bhgqk,bhkd->bhgqd", weights, v).reshape(b, n, s1, d)
    lse = jnp.where(total > 0, row_max + jnp.log(jnp.where(total > 0, total, 1.0)), -jnp.inf)[..., 0]
    return out, lse
