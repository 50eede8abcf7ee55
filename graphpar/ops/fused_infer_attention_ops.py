"""MindSpore's ``FusedInferAttentionScore``: ``PromptFlashAttention`` or ``IncreFlashAttention`` by the query's
length, on their shared base :class:`graphpar.ops.infer_attention_ops.InferAttention` (its own module by size)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from graphpar._logging import notice_once
from graphpar.errors import StrategyError
from graphpar.ops.infer_attention_math import NO_BAND
from graphpar.ops.infer_attention_ops import IQUANT, ANTIQUANT, InferAttention
from graphpar.planner.layout import is_layout_strategy
from graphpar.planner.rules.infer_attention_rules import is_incremental


class FusedInferAttentionScore(InferAttention):
    """``FusedInferAttentionScore(num_heads=1, scale_value=1.0, pre_tokens=2147483647, next_tokens=2147483647,
    input_layout='BSH', num_key_value_heads=0, sparse_mode=0, inner_precise=1, block_size=0, antiquant_mode=0,
    softmax_lse_flag=False, key_antiquant_mode=0, value_antiquant_mode=0)(query, key, value, pse_shift=None,
    attn_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None, <quantization inputs: None>,
    antiquant_scale=None, antiquant_offset=None, <page attention, padding and prefix inputs: None>)`` →
    ``(attention_out, softmax_lse)``.

    A query of one token per row is the incremental case (IncreFlashAttention's math; ``actual_seq_lengths``,
    ``sparse_mode`` and the band are then unused, as MindSpore documents), else the prompt case
    (PromptFlashAttention's). ``softmax_lse`` is ``(B, N, S1, 1)`` float32 with ``softmax_lse_flag``, else a
    ``(1,)`` zero. Strategy (MindSpore's FusedInferAttentionScoreInfo): key and value are written as tuples of
    entries and split alike; the query splits batch, heads and (prompt) sequence, D whole; the incremental case
    splits the key/value sequence instead (read from key's entry); ``BNSD_BSND`` takes no strategy; per-channel
    ``antiquant_scale`` / ``antiquant_offset`` split the key/value heads as the query's, per-token ones
    (``antiquant_mode=1``, ``(2, B, S)``) the batch and the key/value sequence as the key's. The attribute
    ``enable_ring_attention`` (``add_prim_attr``; a prompt in BSH or BNSD, sparse mode 0, ``softmax_lse_flag``)
    splits the key/value sequence as the query's: the result is the same, but the blocks are gathered by XLA's
    partitioner rather than passed round a ring of send/receives as MindSpore builds them."""

    input_names = ("query", "key", "value", "pse_shift", "attn_mask", "actual_seq_lengths",
                   "actual_seq_lengths_kv") + ANTIQUANT
    optional_inputs = 6
    call_names = input_names[:7] + IQUANT + ANTIQUANT + (
        "block_table", "query_padding_size", "kv_padding_size", "key_antiquant_scale", "key_antiquant_offset",
        "value_antiquant_scale", "value_antiquant_offset", "key_shared_prefix", "value_shared_prefix",
        "actual_shared_prefix_len")
    layouts = ("BSH", "BNSD", "BSND", "BNSD_BSND")

    def __init__(self, num_heads: int = 1, scale_value: float = 1.0, pre_tokens: int = NO_BAND,
                 next_tokens: int = NO_BAND, input_layout: str = "BSH", num_key_value_heads: int = 0,
                 sparse_mode: int = 0, inner_precise: int = 1, block_size: int = 0, antiquant_mode: int = 0,
                 softmax_lse_flag: bool = False, key_antiquant_mode: int = 0, value_antiquant_mode: int = 0):
        if sparse_mode not in (0, 1, 2, 3, 4):
            raise ValueError(f"FusedInferAttentionScore(sparse_mode={sparse_mode!r}): valid modes are 0-4 (5-8 are "
                             f"not implemented in MindSpore either)")
        if antiquant_mode not in (0, 1):
            raise ValueError(f"FusedInferAttentionScore(antiquant_mode={antiquant_mode!r}): valid: 0 (per tensor or "
                             f"per channel), 1 (per token)")
        for name, value in (("block_size", block_size), ("key_antiquant_mode", key_antiquant_mode),
                            ("value_antiquant_mode", value_antiquant_mode)):
            if value != 0:
                raise ValueError(f"FusedInferAttentionScore({name}={value!r}): page attention and the separate "
                                 f"key/value antiquant are not built; valid: {name}=0")
        super().__init__(num_heads, input_layout, num_key_value_heads, scale_value=float(scale_value),
                         pre_tokens=int(pre_tokens), next_tokens=int(next_tokens), sparse_mode=int(sparse_mode),
                         inner_precise=inner_precise, softmax_lse_flag=bool(softmax_lse_flag),
                         antiquant_mode=int(antiquant_mode))

    def shard(self, in_strategy: Any = None, out_strategy: Any = None) -> "FusedInferAttentionScore":
        """MindSpore writes key's and value's entries as tuples of entries, one per tensor of the key list
        (``((dp, 1, mp), ((dp, 1, mp),), ((dp, 1, mp),))``); graphpar's key is one tensor, so one entry each."""
        if isinstance(in_strategy, tuple) and len(in_strategy) >= 3 and not is_layout_strategy(in_strategy):
            rows = list(in_strategy)
            for i, name in ((1, "key"), (2, "value")):
                row = rows[i]
                if not (isinstance(row, tuple) and len(row) == 1 and isinstance(row[0], tuple)):
                    raise StrategyError(self.name, in_strategy, f"the {name} entry {row!r} must be a tuple holding "
                                        f"one entry per {name} tensor", hint=f"Write (({name} splits),), e.g. "
                                        f"((2, 1, 4), ((2, 1, 4),), ((2, 1, 4),))")
                rows[i] = row[0]
            in_strategy = tuple(rows)
        return super().shard(in_strategy, out_strategy)

    def _query_splits(self, rows, shapes, hint, scope):
        layout = self.attrs["input_layout"]
        if layout == "BNSD_BSND":
            self._refuse(hint, scope, "input_layout 'BNSD_BSND' takes no strategy (MindSpore's parallel rule "
                         "covers BSH, BNSD and BSND)", "Use input_layout='BNSD' and transpose the output")
        splits = self._layout_splits(rows["query"], hint, scope)
        incremental = is_incremental(self.name, self.attrs, shapes["query"])
        if self.attrs.get("enable_ring_attention"):
            problem = ("a one-token query" if incremental else f"input_layout {layout!r}" if layout not in (
                "BSH", "BNSD") else f"sparse_mode {self.attrs['sparse_mode']}" if self.attrs["sparse_mode"] else
                "softmax_lse_flag=False" if not self.attrs["softmax_lse_flag"] else None)
            if problem is not None:
                self._refuse(hint, scope, f"enable_ring_attention is set with {problem}", "Ring attention takes "
                             "a prompt in BSH or BNSD, sparse_mode=0 and softmax_lse_flag=True (as MindSpore's)")
            notice_once("fias:ring", "FusedInferAttentionScore(enable_ring_attention): the key/value sequence is "
                        "split as the query's; XLA's partitioner gathers the key/value blocks (no ring of "
                        "send/receives as MindSpore builds); the result is the same")
        if incremental:
            seq = 1 if layout in ("BSH", "BSND") else 2
            return {"b": splits["b"], "n": splits["n"], "kv": rows["key"][seq]}
        return splits

    def compute(self, query, key, value, pse_shift=None, attn_mask=None, actual_seq_lengths=None,
                actual_seq_lengths_kv=None, antiquant_scale=None, antiquant_offset=None):
        incremental = is_incremental(self.name, self.attrs, query.shape)
        if incremental and self.attrs["input_layout"] == "BNSD_BSND":
            raise ValueError(f"FusedInferAttentionScore ('{self.instance_name}'): input_layout 'BNSD_BSND' needs a "
                             f"query of more than one token")
        if incremental and actual_seq_lengths is not None:
            notice_once("fias:incremental-actual_seq_lengths", "FusedInferAttentionScore: with a one-token query "
                        "actual_seq_lengths is unused (as in MindSpore); actual_seq_lengths_kv gives the cache "
                        "lengths")
        key, value = self._antiquant(key, value, antiquant_scale, antiquant_offset)
        out, lse = self._attention(query, key, value, attn_mask, pse_shift,
                                   None if incremental else actual_seq_lengths, actual_seq_lengths_kv, incremental)
        lse = lse[..., None] if self.attrs["softmax_lse_flag"] else jnp.zeros((1,), jnp.float32)
        return out, lse
