"""MindSpore's functional forms of the inference attention ops (``ops.prompt_flash_attention``,
``ops.incre_flash_attention``, ``ops.fused_infer_attention_score``): each builds the primitive from its keyword
arguments and calls it, so the refusals and the math are the primitive's (:mod:`graphpar.ops.infer_attention_ops`).
"""

from __future__ import annotations

from typing import Any

from graphpar.ops.fused_infer_attention_ops import FusedInferAttentionScore
from graphpar.ops.infer_attention_math import NO_BAND
from graphpar.ops.infer_attention_ops import IncreFlashAttention, PromptFlashAttention


def prompt_flash_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, actual_seq_lengths: Any = None,
                           actual_seq_lengths_kv: Any = None, pse_shift: Any = None, deq_scale1: Any = None,
                           quant_scale1: Any = None, deq_scale2: Any = None, quant_scale2: Any = None,
                           quant_offset2: Any = None, num_heads: int = 1, scale_value: float = 1.0,
                           pre_tokens: int = NO_BAND, next_tokens: int = 0, input_layout: str = "BSH",
                           num_key_value_heads: int = 0, sparse_mode: int = 0, inner_precise: int = 1) -> Any:
    """``mindspore.ops.prompt_flash_attention``: :class:`PromptFlashAttention`'s output."""
    op = PromptFlashAttention(num_heads, scale_value, pre_tokens, next_tokens, input_layout, num_key_value_heads,
                              sparse_mode, inner_precise)
    return op(query, key, value, attn_mask, actual_seq_lengths, actual_seq_lengths_kv, pse_shift, deq_scale1,
              quant_scale1, deq_scale2, quant_scale2, quant_offset2)


def incre_flash_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, actual_seq_lengths: Any = None,
                          pse_shift: Any = None, dequant_scale1: Any = None, quant_scale1: Any = None,
                          dequant_scale2: Any = None, quant_scale2: Any = None, quant_offset2: Any = None,
                          antiquant_scale: Any = None, antiquant_offset: Any = None, block_table: Any = None,
                          num_heads: int = 1, input_layout: str = "BSH", scale_value: float = 1.0,
                          num_key_value_heads: int = 0, block_size: int = 0, inner_precise: int = 1,
                          kv_padding_size: Any = None) -> Any:
    """``mindspore.ops.incre_flash_attention``: :class:`IncreFlashAttention`'s output."""
    op = IncreFlashAttention(num_heads, input_layout, scale_value, num_key_value_heads, block_size, inner_precise)
    return op(query, key, value, attn_mask, actual_seq_lengths, pse_shift, dequant_scale1, quant_scale1,
              dequant_scale2, quant_scale2, quant_offset2, antiquant_scale, antiquant_offset, block_table,
              kv_padding_size)


def fused_infer_attention_score(query: Any, key: Any, value: Any, *, pse_shift: Any = None, atten_mask: Any = None,
                                actual_seq_lengths: Any = None, actual_seq_lengths_kv: Any = None,
                                num_heads: int = 1, scale: float = 1.0, pre_tokens: int = NO_BAND,
                                next_tokens: int = NO_BAND, input_layout: str = "BSH", num_key_value_heads: int = 0,
                                sparse_mode: int = 0, inner_precise: int = 1, block_size: int = 0,
                                antiquant_mode: int = 0, key_antiquant_mode: int = 0, value_antiquant_mode: int = 0,
                                softmax_lse_flag: bool = False, **unbuilt: Any) -> tuple[Any, Any]:
    """``mindspore.ops.fused_infer_attention_score`` (the mask named ``atten_mask``, the scale ``scale``, as
    MindSpore's functional form spells them): ``(attention_out, softmax_lse)``. The quantization, page attention,
    padding and prefix inputs (``unbuilt``) are passed on to the primitive, which builds ``antiquant_scale`` /
    ``antiquant_offset`` and refuses the others by name."""
    op = FusedInferAttentionScore(num_heads, scale, pre_tokens, next_tokens, input_layout, num_key_value_heads,
                                  sparse_mode, inner_precise, block_size, antiquant_mode, softmax_lse_flag,
                                  key_antiquant_mode, value_antiquant_mode)
    return op(query, key, value, pse_shift, atten_mask, actual_seq_lengths, actual_seq_lengths_kv, **unbuilt)
