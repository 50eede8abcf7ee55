"""MindSpore's inference attention primitives: ``PromptFlashAttention`` (a full prompt) and ``IncreFlashAttention``
(one new token against a key/value cache); ``FusedInferAttentionScore`` (either, by the query's length) is
:mod:`graphpar.ops.fused_infer_attention_ops`, on the same base.

The math is :mod:`graphpar.ops.infer_attention_math`; the layouts of a strategy are
:mod:`graphpar.planner.rules.infer_attention_rules`. A MindSpore strategy has one entry per *given* input (``None``
inputs have none), ``FusedInferAttentionScore`` writes key and value as tuples of entries (one per tensor of the key
list), and MindSpore reads only the query's entry (the incremental key's sequence split too) and its own checks of
the others: the other inputs are laid out as the query's splits imply (its ``InferTensorMap``). So does graphpar:
:meth:`InferAttention._named_strategies` applies MindSpore's checks by name and hands the planner the entries the
query's splits imply.

Built: layouts BSH / BNSD (and BSND, BNSD_BSND for FusedInferAttentionScore), ``attn_mask`` (non-zero discards),
sparse modes 0-4, ``pre_tokens`` / ``next_tokens``, ``actual_seq_lengths(_kv)`` (tensors or lists of ints),
``pse_shift`` (added to the scaled scores), ``num_key_value_heads`` (grouped-query attention), ``scale_value``,
``softmax_lse_flag``, ``antiquant_scale`` / ``antiquant_offset`` (an int8 key/value cache dequantized per tensor,
per channel or, ``FusedInferAttentionScore(antiquant_mode=1)``, per token; with a float key/value they are unused,
said once, as the kernel reads them for int8 only). Refused by name: the quantization inputs (``deq_scale1`` ...
``quant_offset2``), the separate key/value antiquant inputs, page attention (``block_table``, ``block_size``),
padding sizes and shared prefixes.
``inner_precise`` (the kernel's float16 precision / row-correction choice) changes nothing: graphpar computes in
float32 and always zeroes a fully discarded row.
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np

from graphpar._logging import notice_once
from graphpar.errors import StrategyError
from graphpar.ops.infer_attention_math import (NO_BAND, antiquant_channel_shape, attend, dequantize, from_bnsd,
                                               length_discard, sparse_discard, to_bnsd)
from graphpar.ops.primitive import Primitive
from graphpar.ops.strategy import check_ranks
from graphpar.planner.layout import is_layout_strategy
from graphpar.planner.rules.infer_attention_rules import (attention_labels, head_check, heads_of,
                                                           is_incremental)

_QUANT = ("deq_scale1", "quant_scale1", "deq_scale2", "quant_scale2", "quant_offset2")
IQUANT = ("dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2")
ANTIQUANT = ("antiquant_scale", "antiquant_offset")
_WHY = {"block_table": "page attention is not built", "kv_padding_size": "left-padded key/value is not built",
        "query_padding_size": "left-padded queries are not built",
        "key_shared_prefix": "shared prefixes are not built", "value_shared_prefix": "shared prefixes are not built",
        "actual_shared_prefix_len": "shared prefixes are not built"}
_COMPRESSED_MASK = 2048  # sparse modes 2-4 take the kernel's (2048, 2048) lower-triangular template as attn_mask


class InferAttention(Primitive):
    """The shared call, checks and strategy translation. ``call_names``: MindSpore's call inputs in order; those
    among ``input_names`` are built, another one given (not None) is refused by name."""

    call_names: ClassVar[tuple[str, ...]]
    layouts: ClassVar[tuple[str, ...]] = ("BSH", "BNSD")
    # MindSpore's IncreFlashAttentionInfo checks the antiquant entries (CheckAntiquantStrategy); FusedInferAttention-
    # ScoreInfo lays them out by its tensor map whatever they say, as it does its other optional inputs
    checks_antiquant_entries: ClassVar[bool] = False

    def __init__(self, num_heads: int, input_layout: str, num_key_value_heads: int, **attrs: Any):
        if input_layout not in self.layouts:
            raise ValueError(f"{type(self).__name__}(input_layout={input_layout!r}): valid layouts are "
                             f"{', '.join(map(repr, self.layouts))}")
        if int(num_heads) <= 0 or int(num_key_value_heads) < 0 or (
                num_key_value_heads and int(num_heads) % int(num_key_value_heads)):
            raise ValueError(f"{type(self).__name__}(num_heads={num_heads}, num_key_value_heads="
                             f"{num_key_value_heads}): num_heads must be positive and a multiple of "
                             f"num_key_value_heads (0: as many as num_heads)")
        if attrs.get("inner_precise", 1) not in (0, 1, 2, 3):
            raise ValueError(f"{type(self).__name__}(inner_precise={attrs['inner_precise']!r}): valid: 0, 1, 2, 3")
        super().__init__(num_heads=int(num_heads), input_layout=input_layout,
                         num_key_value_heads=int(num_key_value_heads), **attrs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > len(self.call_names) or set(kwargs) - set(self.call_names[len(args):]):
            raise TypeError(f"{self.name} ('{self.instance_name}') takes the inputs {', '.join(self.call_names)}; "
                            f"got {len(args)} positional and {sorted(kwargs)}")
        given = dict(zip(self.call_names, args), **kwargs)
        for name in self._unbuilt():
            if given.get(name) is not None:
                why = _WHY.get(name, "quantized attention is not built")
                raise ValueError(f"{self.name} ('{self.instance_name}'): the input {name} is given but {why}; "
                                 f"pass None (quantize or dequantize outside the op)")
        for name in ("key", "value"):
            given[name] = self._single(name, given.get(name))
        for name in ("actual_seq_lengths", "actual_seq_lengths_kv"):
            if isinstance(given.get(name), (list, tuple)):  # MindSpore's type_cast: a list of ints is a tensor
                given[name] = np.asarray(given[name], np.int64)
        return super().__call__(*(given.get(n) for n in self.input_names))

    def shard(self, in_strategy: Any = None, out_strategy: Any = None) -> "InferAttention":
        """A strategy with entries beyond the built inputs is for the quantization (or page attention) inputs,
        which graphpar refuses: said here, by name, rather than as a count."""
        if (isinstance(in_strategy, tuple) and not is_layout_strategy(in_strategy)
                and len(self.input_names) < len(in_strategy) <= len(self.call_names)):
            raise StrategyError(self.name, in_strategy, f"{len(in_strategy)} entries, more than the inputs graphpar "
                                f"builds ({', '.join(self.input_names)}): the other inputs "
                                f"({', '.join(self._unbuilt())}) are quantization, page "
                                f"attention or padding inputs, which are not built",
                                hint="Give one entry per given input among the built ones")
        return super().shard(in_strategy, out_strategy)

    def _unbuilt(self) -> tuple[str, ...]:
        return tuple(n for n in self.call_names if n not in self.input_names)

    def _single(self, name: str, x: Any) -> Any:
        if isinstance(x, (list, tuple)):
            if len(x) != 1:
                raise ValueError(f"{self.name} ('{self.instance_name}'): {name} is a list of {len(x)} tensors; "
                                 f"graphpar builds one {name} tensor (a list of one, or the tensor)")
            return x[0]
        return x

    # --- the strategy ------------------------------------------------------------------------------------------
    def _named_strategies(self, shapes, names, scope):
        """MindSpore's checks of the user's entries (its ``CheckStrategy``), by name; then every entry as the
        query's splits lay that input out (its tensor maps), which the planner's rule labels alike."""
        hint = self.in_strategy
        if hint is None or is_layout_strategy(hint):
            return hint, self.out_strategy
        check_ranks(self.instance_name, scope, hint, shapes, names)
        for name, row, shape in zip(names, hint, shapes):
            for d, (split, size) in enumerate(zip(row, shape)):
                if size % split:
                    self._refuse(hint, scope, f"{name} dim {d} has size {size}, which the split {split} does not "
                                 f"divide", f"Use a divisor of {size} for {name} dim {d}")
        rows = dict(zip(names, hint))
        if rows["key"] != rows["value"]:
            self._refuse(hint, scope, f"key is split {rows['key']} and value {rows['value']}",
                         "Split key and value alike")
        splits = self._query_splits(rows, dict(zip(names, shapes)), hint, scope)
        problem = head_check(self.attrs)(splits)
        if problem is not None:
            self._refuse(hint, scope, *problem)
        labels = attention_labels(self.name, self.attrs, names, shapes)[0]
        derived = tuple(tuple(splits.get(l, 1) if l else 1 for l in row) for row in labels)
        for name, row, want in zip(names, hint, derived):
            if name in ANTIQUANT and self.checks_antiquant_entries and tuple(row) != want:
                self._refuse(hint, scope, f"{name} is split {tuple(row)}; it splits the key/value heads as the "
                             f"query's ({splits.get('n', 1)}) and nothing else", f"Give {name} {want}")
        return derived, self.out_strategy

    def _layout_splits(self, q: tuple, hint: tuple, scope: str) -> dict[str, int]:
        """``{"b", "s", "n"}`` splits read off the query's entry, with MindSpore's checks of it."""
        layout = self.attrs["input_layout"]
        if layout == "BSH":
            if self.attrs["num_heads"] % q[2]:
                self._refuse(hint, scope, f"num_heads {self.attrs['num_heads']} is not divisible by the query's "
                             f"hidden split {q[2]}", "Split the hidden dimension by a divisor of num_heads")
            return {"b": q[0], "s": q[1], "n": q[2]}
        if q[3] != 1:
            self._refuse(hint, scope, f"the query's D dimension is split {q[3]}", "Leave D whole (1)")
        if layout == "BSND":
            return {"b": q[0], "s": q[1], "n": q[2]}
        return {"b": q[0], "n": q[1], "s": q[2]}

    def _query_splits(self, rows: dict, shapes: dict, hint: tuple, scope: str) -> dict[str, int]:
        raise NotImplementedError

    def _refuse(self, hint: tuple, scope: str, what: str, fix: str) -> None:
        raise StrategyError(self.instance_name, hint, what, scope, fix)

    # --- the math ----------------------------------------------------------------------------------------------
    def _antiquant(self, key, value, scale, offset):
        """Key and value as the attention reads them: an int8 pair dequantized by ``antiquant_scale`` /
        ``antiquant_offset`` (row 0 the key's, row 1 the value's). MindSpore's kernel reads them for an int8 cache
        only, so with a float key/value they are unused (said once)."""
        if scale is None and offset is None:
            return key, value
        if scale is None:
            raise ValueError(f"{self.name} ('{self.instance_name}'): antiquant_offset is given without "
                             f"antiquant_scale; give the scale (symmetric) or both (asymmetric)")
        int8 = [jnp.dtype(t.dtype) == jnp.int8 for t in (key, value)]
        if not any(int8):
            notice_once(f"{self.name}:antiquant-float", f"{self.name}: antiquant_scale / antiquant_offset "
                        f"dequantize an int8 key/value only (as MindSpore's kernel); key/value of {key.dtype} are "
                        f"read as they are and the antiquant inputs are unused")
            return key, value
        if not all(int8):
            raise ValueError(f"{self.name} ('{self.instance_name}'): key is {key.dtype} and value {value.dtype}; "
                             f"antiquant dequantizes an int8 key and value together: give both int8")
        layout = "BNSD" if self.attrs["input_layout"] == "BNSD_BSND" else self.attrs["input_layout"]
        nkv = heads_of(self.attrs)[1]
        per_token = self.attrs.get("antiquant_mode", 0) == 1
        seq = key.shape[2 if layout == "BNSD" else 1]
        valid = ((2, key.shape[0], seq),) if per_token else (
            (2,), (2,) + antiquant_channel_shape(layout, nkv, key.shape[-1] // nkv if layout == "BSH" else
                                                 key.shape[-1]))
        kinds = "per token (antiquant_mode=1)" if per_token else "per tensor or per channel"
        for name, t in (("antiquant_scale", scale), ("antiquant_offset", offset)):
            if t is not None and tuple(t.shape) not in valid:
                raise ValueError(f"{self.name} ('{self.instance_name}'): {name} {tuple(t.shape)} is not {kinds}: "
                                 f"valid {' or '.join(map(str, valid))} (row 0 the key's, 1 the value's)")
        return tuple(dequantize(t, scale, offset, i, layout, per_token) for i, t in enumerate((key, value)))

    def _attention(self, query, key, value, attn_mask, pse_shift, q_len, kv_len, incremental: bool):
        """``(out in the output layout, lse (B, N, S1))``."""
        a = self.attrs
        n, nkv = heads_of(a)
        layout = a["input_layout"]
        q = to_bnsd(query, "BNSD" if layout == "BNSD_BSND" else layout, n)
        k, v = (to_bnsd(t, "BNSD" if layout == "BNSD_BSND" else layout, nkv) for t in (key, value))
        b, heads, s1, d = q.shape
        if heads != n or k.shape[1] != nkv or k.shape != v.shape or k.shape[3] != d or k.shape[0] != b:
            raise ValueError(f"{self.name} ('{self.instance_name}'): query {tuple(query.shape)}, key "
                             f"{tuple(key.shape)} and value {tuple(value.shape)} in layout {layout} do not hold "
                             f"num_heads={n} query heads and {nkv} key/value heads of one head size")
        s2 = k.shape[2]
        discard = []
        sparse = a.get("sparse_mode", 0)
        if attn_mask is not None and (incremental or sparse in (0, 1)):
            discard.append(self._mask(attn_mask, b, n, s1, s2, incremental))
        elif attn_mask is not None and tuple(attn_mask.shape[-2:]) != (_COMPRESSED_MASK,) * 2:
            raise ValueError(f"{self.name} ('{self.instance_name}'): sparse_mode={sparse} takes the compressed "
                             f"({_COMPRESSED_MASK}, {_COMPRESSED_MASK}) attn_mask, got {tuple(attn_mask.shape)}")
        if sparse == 1 and attn_mask is None and not incremental:
            raise ValueError(f"{self.name} ('{self.instance_name}'): sparse_mode=1 (allMask) needs the full "
                             f"attn_mask (S1, S2); give it, or use sparse_mode=0")
        if not incremental:
            band = sparse_discard(sparse, s1, s2, a.get("pre_tokens", NO_BAND), a.get("next_tokens", NO_BAND),
                                  attn_mask is not None, q_len, kv_len)
            if band is not None:
                discard.append(band)
        lengths = length_discard(s1, s2, q_len, kv_len)
        if lengths is not None:
            discard.append(lengths)
        pse = None
        if pse_shift is not None:
            if pse_shift.ndim != 4 or pse_shift.shape[0] not in (1, b) or pse_shift.shape[1] != n or (
                    pse_shift.shape[2] < s1 or pse_shift.shape[3] < s2):
                raise ValueError(f"{self.name} ('{self.instance_name}'): pse_shift {tuple(pse_shift.shape)} must "
                                 f"be ({b} or 1, {n}, >= {s1}, >= {s2})")
            pse = pse_shift[:, :, :s1, :s2]
        out, lse = attend(q, k, v, a["scale_value"], discard, pse)
        return from_bnsd(out.astype(query.dtype), layout), lse

    def _mask(self, mask, b: int, n: int, s1: int, s2: int, incremental: bool):
        """``attn_mask`` as a boolean ``(B or 1, N or 1, S1, S2)`` (True: discard)."""
        m = jnp.asarray(mask) != 0
        if m.ndim == 2:
            m = m[:, None, None, :] if incremental else m[None, None]
        elif m.ndim == 3:
            m = m[:, None]
        if m.ndim != 4 or m.shape[0] not in (1, b) or m.shape[1] not in (1, n) or m.shape[2:] != (s1, s2):
            raise ValueError(f"{self.name} ('{self.instance_name}'): attn_mask {tuple(mask.shape)} is not one of "
                             f"MindSpore's shapes for S1={s1}, S2={s2}: (S1, S2), (B, S1, S2), (1, S1, S2), "
                             f"(B, 1, S1, S2), (1, 1, S1, S2) (incremental: (B, S2), (B, 1, S2), (B, 1, 1, S2))")
        return m


class PromptFlashAttention(InferAttention):
    """``PromptFlashAttention(num_heads=1, scale_value=1.0, pre_tokens=2147483647, next_tokens=0,
    input_layout='BSH', num_key_value_heads=0, sparse_mode=0, inner_precise=1)(query, key, value, attn_mask=None,
    actual_seq_lengths=None, actual_seq_lengths_kv=None, pse_shift=None, deq_scale1=None, quant_scale1=None,
    deq_scale2=None, quant_scale2=None, quant_offset2=None)`` → ``attention_out`` (the query's shape and dtype).

    Strategy (MindSpore's PromptFlashAttentionInfo): the query splits batch, sequence and heads (BNSD: D whole);
    key and value are split alike, their sequence whole; the heads' split divides ``num_heads`` and
    ``num_key_value_heads``; a full ``attn_mask`` has its sequence entry equal to the query's (1 for the compressed
    mask of sparse modes 2-4)."""

    input_names = ("query", "key", "value", "attn_mask", "actual_seq_lengths", "actual_seq_lengths_kv", "pse_shift")
    optional_inputs = 4
    call_names = input_names + _QUANT

    def __init__(self, num_heads: int = 1, scale_value: float = 1.0, pre_tokens: int = NO_BAND,
                 next_tokens: int = 0, input_layout: str = "BSH", num_key_value_heads: int = 0,
                 sparse_mode: int = 0, inner_precise: int = 1):
        if sparse_mode not in (0, 1, 2, 3, 4):
            raise ValueError(f"PromptFlashAttention(sparse_mode={sparse_mode!r}): valid modes are 0 (mask and "
                             f"band), 1 (full mask), 2 (causal, top-left), 3 (causal, bottom-right), 4 (band)")
        super().__init__(num_heads, input_layout, num_key_value_heads, scale_value=float(scale_value),
                         pre_tokens=int(pre_tokens), next_tokens=int(next_tokens), sparse_mode=int(sparse_mode),
                         inner_precise=inner_precise)

    def _query_splits(self, rows, shapes, hint, scope):
        splits = self._layout_splits(rows["query"], hint, scope)
        if "attn_mask" in rows:
            row = rows["attn_mask"]
            want = 1 if self.attrs["sparse_mode"] in (2, 3, 4) else splits["s"]
            seq = row[-2] if len(row) >= 2 else 1
            if seq != want:
                self._refuse(hint, scope, f"attn_mask's sequence dimension is split {seq}; it must be {want} (the "
                             f"query's sequence split; 1 for the compressed mask of sparse modes 2-4)",
                             f"Split attn_mask's dimension {len(row) - 2} by {want}")
        return splits

    def compute(self, query, key, value, attn_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None,
                pse_shift=None):
        return self._attention(query, key, value, attn_mask, pse_shift, actual_seq_lengths, actual_seq_lengths_kv,
                               incremental=False)[0]


class IncreFlashAttention(InferAttention):
    """``IncreFlashAttention(num_heads=1, input_layout='BSH', scale_value=1.0, num_key_value_heads=0,
    block_size=0, inner_precise=1)(query, key, value, attn_mask=None, actual_seq_lengths=None, pse_shift=None,
    dequant_scale1=None, quant_scale1=None, dequant_scale2=None, quant_scale2=None, quant_offset2=None,
    antiquant_scale=None, antiquant_offset=None, block_table=None, kv_padding_size=None)`` → ``attention_out``.

    One query token per batch row (query ``(B, 1, H)`` / ``(B, N, 1, D)``) against the key/value cache (a list of
    one tensor, or the tensor); ``actual_seq_lengths`` is each row's valid cache length. Strategy (MindSpore's
    IncreFlashAttentionInfo): query, key and value split alike, by batch and heads only; ``attn_mask`` split as the
    query's batch, nothing else; ``antiquant_scale`` / ``antiquant_offset`` split the key/value heads as the query's
    (``(1, mp)`` in BSH, ``(1, mp, 1, 1)`` in BNSD)."""

    input_names = ("query", "key", "value", "attn_mask", "actual_seq_lengths", "pse_shift") + ANTIQUANT
    optional_inputs = 5
    checks_antiquant_entries = True
    call_names = input_names[:6] + IQUANT + ANTIQUANT + ("block_table", "kv_padding_size")

    def __init__(self, num_heads: int = 1, input_layout: str = "BSH", scale_value: float = 1.0,
                 num_key_value_heads: int = 0, block_size: int = 0, inner_precise: int = 1):
        if block_size != 0:
            raise ValueError(f"IncreFlashAttention(block_size={block_size!r}): page attention is not built; "
                             f"valid: block_size=0")
        super().__init__(num_heads, input_layout, num_key_value_heads, scale_value=float(scale_value),
                         block_size=0, inner_precise=inner_precise)

    def _query_splits(self, rows, shapes, hint, scope):
        q = rows["query"]
        if rows["key"] != q:
            self._refuse(hint, scope, f"query is split {q} and key/value {rows['key']}",
                         "Split query, key and value alike")
        seq = 1 if self.attrs["input_layout"] == "BSH" else 2
        if q[seq] != 1:
            self._refuse(hint, scope, f"the query's S dimension is split {q[seq]}", "Leave S whole (1)")
        splits = self._layout_splits(q, hint, scope)
        mask = rows.get("attn_mask")
        if mask is not None and (mask[0] != q[0] or any(s != 1 for s in mask[1:])):
            self._refuse(hint, scope, f"attn_mask is split {mask}; it splits its batch as the query's ({q[0]}) and "
                         f"nothing else", f"Give attn_mask {(q[0],) + (1,) * (len(mask) - 1)}")
        return {"b": splits["b"], "n": splits["n"]}

    def compute(self, query, key, value, attn_mask=None, actual_seq_lengths=None, pse_shift=None,
                antiquant_scale=None, antiquant_offset=None):
        s1 = query.shape[1 if self.attrs["input_layout"] == "BSH" else 2]
        if s1 != 1:
            raise ValueError(f"IncreFlashAttention ('{self.instance_name}'): the query holds {s1} tokens; it takes "
                             f"one per batch row (PromptFlashAttention takes a prompt)")
        key, value = self._antiquant(key, value, antiquant_scale, antiquant_offset)
        return self._attention(query, key, value, attn_mask, pse_shift, None, actual_seq_lengths,
                               incremental=True)[0]
