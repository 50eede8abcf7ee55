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
from graphpar.ops.primitive import Primitive
from graphpar.planner.layout import Layout

_NO_BAND = 2147483647  # MindSpore's default pre_tokens / next_tokens: no limit
_CHUNK = 128  # keys per scan step: the largest transient score block is (..., S1 / cp, _CHUNK)
_MASKED = -1e30  # a finite "minus infinity" (computed in float32): a fully masked chunk keeps the running max finite
_UNSUPPORTED_INPUTS = ("real_shift", "drop_mask", "padding_mask", "attn_mask", "prefix", "actual_seq_qlen",
                       "actual_seq_kvlen")


class FlashAttentionScore(Primitive):
    """``FlashAttentionScore(head_num, keep_prob=1.0, scale_value=1.0, pre_tokens=2147483647,
    next_tokens=2147483647, inner_precise=0, input_layout="BSH", sparse_mode=0)(query, key, value)`` →
    ``(softmax_max, softmax_sum, softmax_out, attention_out)``.

    Layouts ``BNSD`` (query ``(B, N, S1, D)``) and ``BSH`` (``(B, S1, N * D)``). Key position ``k`` is seen by
    query position ``q`` when ``q - pre_tokens <= k <= q + next_tokens`` (``next_tokens=0``: causal).
    ``softmax_max`` / ``softmax_sum`` are ``(B, N, S1, 8)`` float32 (the value repeated 8 times, as the kernel writes
    them); ``softmax_out`` is reserved (MindSpore's too) and empty. The optional tensor inputs (``real_shift``,
    ``attn_mask``, ...), dropout (``keep_prob < 1``), another ``sparse_mode`` and key/value heads fewer than the
    query's are refused by name.
    """

    input_names = ("query", "key", "value")

    def __init__(self, head_num: int, keep_prob: float = 1.0, scale_value: float = 1.0, pre_tokens: int = _NO_BAND,
                 next_tokens: int = _NO_BAND, inner_precise: int = 0, input_layout: str = "BSH",
                 sparse_mode: int = 0):
        if input_layout not in ("BSH", "BNSD"):
            raise ValueError(f"FlashAttentionScore(input_layout={input_layout!r}): graphpar supports 'BSH' and "
                             f"'BNSD' (MindSpore's SBH, BSND and TND are not built)")
        if keep_prob != 1.0:
            raise ValueError(f"FlashAttentionScore(keep_prob={keep_prob!r}): attention dropout is not built; valid: "
                             f"keep_prob=1.0 (put a Dropout on the attention's output instead)")
        if sparse_mode != 0:
            raise ValueError(f"FlashAttentionScore(sparse_mode={sparse_mode!r}): only sparse_mode=0 is built (the band "
                             f"is pre_tokens / next_tokens; next_tokens=0 is causal)")
        super().__init__(head_num=int(head_num), keep_prob=keep_prob, scale_value=float(scale_value),
                         pre_tokens=int(pre_tokens), next_tokens=int(next_tokens), inner_precise=inner_precise,
                         input_layout=input_layout, sparse_mode=sparse_mode)

    def __call__(self, query, key, value, *optional: Any):
        for name, given in zip(_UNSUPPORTED_INPUTS, optional):
            if given is not None:
                raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): the input {name} is not built; "
                                 f"pass None (masks: pre_tokens / next_tokens give the band)")
        return super().__call__(query, key, value)

    def ring_size(self) -> int:
        """How many ring blocks the strategy asks for: the split of the query's sequence dimension (1: none)."""
        if self.in_strategy is None:
            return 1
        seq_dim = 2 if self.attrs["input_layout"] == "BNSD" else 1
        q_split, k_split, v_split = (_split(t, seq_dim) for t in self.in_strategy)
        if not q_split == k_split == v_split:
            raise StrategyError(self.instance_name, self.in_strategy, f"the key and value sequence dimension must be "
                                f"split as the query's ({q_split}: ring attention holds key/value block i with query "
                                f"block i)", hint="Split dimension S of query, key and value alike")
        return q_split

    def compute(self, query, key, value):
        a = self.attrs
        bsh = a["input_layout"] == "BSH"
        if bsh:  # (B, S, N * D) -> (B, N, S, D)
            query, key, value = (jnp.swapaxes(t.reshape(t.shape[0], t.shape[1], a["head_num"], -1), 1, 2)
                                 for t in (query, key, value))
        if key.shape[1] != query.shape[1]:
            raise ValueError(f"FlashAttentionScore ('{self.instance_name}'): key/value have {key.shape[1]} heads and "
                             f"the query {query.shape[1]}; only equal head counts are built")
        out, m, l = ring_attention(query, key, value, a["scale_value"], a["pre_tokens"], a["next_tokens"],
                                   self.ring_size())
        stats = (jnp.broadcast_to(m[..., None], (*m.shape, 8)), jnp.broadcast_to(l[..., None], (*l.shape, 8)))
        if bsh:
            out = jnp.swapaxes(out, 1, 2).reshape(out.shape[0], out.shape[2], -1)
        return stats[0], stats[1], jnp.zeros((0,), query.dtype), out.astype(query.dtype)


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
