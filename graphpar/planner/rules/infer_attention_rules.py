"""Sharding rules of MindSpore's inference attention ops (``graphpar.ops.infer_attention_ops``), as MindSpore's
``PromptFlashAttentionInfo``, ``IncreFlashAttentionInfo`` and ``FusedInferAttentionScoreInfo`` lay their tensors out.

Labels: ``b`` the batch, ``n`` the heads (BSH's hidden dimension is heads * D, split by heads; key/value's
``num_key_value_heads`` split alike), ``s`` the query sequence, ``kv`` the key/value sequence. A full-prompt call
(query S > 1) splits ``b``, ``n`` and ``s``; the key/value sequence stays whole (each query block attends to every
key), unless ``FusedInferAttentionScore`` carries the attribute ``enable_ring_attention``, where it is split as the
query's. An incremental call of ``FusedInferAttentionScore`` (query S == 1) may split ``kv`` instead: the softmax then
combines per-device maxima and sums (the LSE combine MindSpore builds by hand). ``IncreFlashAttention`` splits ``b``
and ``n`` only. ``D`` is never split.

The optional inputs follow the query, as MindSpore's tensor maps do: ``attn_mask`` by batch (where it has one) and,
in sparse modes 0 and 1, by the query sequence (``kv`` in the incremental case); the compressed 2048 x 2048 mask of
sparse modes 2-4 is a template, never split; ``pse_shift`` by batch (and, in ``FusedInferAttentionScore``, heads and
sequence); ``actual_seq_lengths`` / ``actual_seq_lengths_kv`` whole; per-channel ``antiquant_scale`` /
``antiquant_offset`` (``(2, kvH)``, ``(2, kvN, 1, D)``, ``(2, kvN, D)``) by the key/value heads, per token
(``antiquant_mode=1``: ``(2, B, S)``) by the batch and the key/value sequence as the key's, per tensor whole.
:func:`attention_labels` is shared with the op, which reads a MindSpore strategy's query (and incremental key) entries
and derives the other entries from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from graphpar.planner.dims import DimSpec, Label, register, shapes_of

Rows = tuple[tuple[Label, ...], ...]

_QUERY = {"BSH": ("b", "s", "n"), "BNSD": ("b", "n", "s", None), "BSND": ("b", "s", "n", None),
          "BNSD_BSND": ("b", "n", "s", None)}


def heads_of(attrs: Mapping) -> tuple[int, int]:
    """``(num_heads, num_key_value_heads)``, the latter 0 meaning "as many as the query"."""
    n = int(attrs["num_heads"])
    return n, int(attrs.get("num_key_value_heads") or 0) or n


def is_incremental(kind: str, attrs: Mapping, query_shape: Sequence[int]) -> bool:
    """True for one query token per batch row: IncreFlashAttention, or FusedInferAttentionScore with query S == 1
    (MindSpore's ``is_ifa_``)."""
    if kind == "IncreFlashAttention":
        return True
    if kind != "FusedInferAttentionScore":
        return False
    layout = attrs["input_layout"]
    return query_shape[2 if layout in ("BNSD", "BNSD_BSND") else 1] == 1


def attention_labels(kind: str, attrs: Mapping, names: Sequence[str],
                     shapes: Sequence[Sequence[int]]) -> tuple[Rows, Rows, tuple[str, ...]]:
    """``(input rows, output rows, order)`` of one call, for its present inputs ``names`` of ``shapes``."""
    layout = attrs["input_layout"]
    query = _QUERY[layout]
    incremental = is_incremental(kind, attrs, shapes[0])
    seq = query.index("s")
    kv_label = "kv" if incremental and kind == "FusedInferAttentionScore" else None
    if not incremental and attrs.get("enable_ring_attention"):  # ring attention: key/value blocks go with the query's
        kv_label = "s"
    kv = tuple(kv_label if d == seq else label for d, label in enumerate(query))
    batch = shapes[0][0]
    sparse = int(attrs.get("sparse_mode", 0))
    rows = []
    for name, shape in zip(names, shapes):
        if name == "query":
            rows.append(query)
        elif name in ("key", "value"):
            rows.append(kv)
        elif name == "attn_mask":
            rows.append(_mask_row(kind, shape, batch, sparse, incremental))
        elif name == "pse_shift":
            rows.append(_pse_row(kind, shape, batch, incremental))
        elif name in ("antiquant_scale", "antiquant_offset"):  # row 0 the key's, row 1 the value's
            rows.append(_antiquant_row(attrs, shape, kv_label))
        else:  # actual_seq_lengths, actual_seq_lengths_kv: MindSpore keeps them whole
            rows.append((None,) * len(shape))
    out = ("b", "s", "n", None) if layout == "BNSD_BSND" else query
    outputs: list[tuple[Label, ...]] = [out]
    if kind == "FusedInferAttentionScore":  # softmax_lse: (B, N, S, 1) with softmax_lse_flag, else a (1,) stub
        outputs.append(("b", "n", None if incremental else "s", None) if attrs.get("softmax_lse_flag") else (None,))
    if layout == "BSH":
        order = ("b", "s", "n")
    else:
        order = ("b", "n", "s")
    if kv_label == "kv":
        order = tuple("kv" if l == "s" else l for l in order)
    return tuple(rows), tuple(outputs), order


def _antiquant_row(attrs: Mapping, shape: Sequence[int], kv_label: Label) -> tuple[Label, ...]:
    if int(attrs.get("antiquant_mode", 0)) == 1 and len(shape) == 3:  # per token: (2, B, S)
        return (None, "b", kv_label)
    return (None, "n") + (None,) * (len(shape) - 2) if len(shape) >= 2 else (None,) * len(shape)


def _mask_row(kind: str, shape: Sequence[int], batch: int, sparse: int, incremental: bool) -> tuple[Label, ...]:
    rank = len(shape)
    row: list[Label] = [None] * rank
    lead = "b" if rank >= 3 and shape[0] == batch else None
    if incremental:  # (B, S2), (B, 1, S2), (B, 1, 1, S2): batch, and the key sequence where it may split
        row[0] = "b" if shape[0] == batch else None
        if kind == "FusedInferAttentionScore":
            row[-1] = "kv"
        return tuple(row)
    fused = kind == "FusedInferAttentionScore"
    if rank >= 3 and (fused or sparse == 0):  # PromptFlashAttention splits the batch in sparse mode 0 only
        row[0] = lead
    if sparse == 0 or (sparse == 1 and not fused):  # a full mask's rows go with the query's (FIAS: mode 0 only)
        row[-2] = "s"
    return tuple(row)


def _pse_row(kind: str, shape: Sequence[int], batch: int, incremental: bool) -> tuple[Label, ...]:
    row: list[Label] = [None] * len(shape)
    if len(shape) >= 3 and shape[0] == batch:
        row[0] = "b"
    if kind == "FusedInferAttentionScore" and len(shape) == 4:  # (B, N, S1, S2)
        row[1] = "n"
        row[3 if incremental else 2] = "kv" if incremental else "s"
    return tuple(row)


def head_check(attrs: Mapping):
    """MindSpore's CheckStrategy arithmetic on the heads: their split must divide ``num_heads`` and
    ``num_key_value_heads`` (a BSH hidden dimension that divides is not enough: a device would hold part of a
    head)."""
    n, nkv = heads_of(attrs)

    def check(splits: dict[str, int]) -> tuple[str, str] | None:
        mp = splits.get("n", 1)
        if n % mp or nkv % mp:
            return (f"the heads are split {mp} ways but num_heads is {n} and num_key_value_heads {nkv}",
                    f"Split the heads by a divisor of both {n} and {nkv}")
        return None
    return check


@register("PromptFlashAttention", "IncreFlashAttention", "FusedInferAttentionScore")
def _infer_attention(node, graph):
    ins, _ = shapes_of(node, graph)
    names = node.input_names or ("query", "key", "value")
    inputs, outputs, order = attention_labels(node.kind, node.attrs, names, ins)
    return DimSpec(inputs, outputs, order, check=head_check(node.attrs))
