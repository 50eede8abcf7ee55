"""MindSpore's 2D/3D tensor-parallel MatMul: ``MatMul().add_prim_attr("enable_nd_tp", True)`` with a layout hint.

An ordinary MatMul needs its inputs' contracted dimension split alike. An ND-TP MatMul (MindSpore's
``MatMulInfo::CheckNDTPInputLayout`` / ``InferNDTPOutputLayout``, matmul_info.cc) takes each input in a layout of
its own and gathers and scatters inside the op, so that a chain of them keeps its activations split over every
device with no redistribution between layers (the output of one is the next one's input layout). Written for
``x @ w`` without transposes (the rules follow the labels, so transposed inputs and batch dimensions work alike):

* **2D**: ``x`` ``(.., m, (x, y))`` or ``(.., m, x)``, ``w`` ``(x, y)``. ``x``'s ``k`` is all-gathered over ``y``
  (when split by it), the product is a partial sum over ``x``, reduce-scattered into ``n``: the output is
  ``(.., m, (y, x))``.
* **3D**: ``x`` ``(.., (.., z, y), x)`` or ``(.., m, x)``, ``w`` ``((x, z), y)``. ``x``'s ``m`` is all-gathered
  over ``y`` (when split by it), ``w``'s ``k`` over ``z``, the product is a partial sum over ``x``,
  reduce-scattered into the output axis ``ndtp_reduce_scatter_axis`` (an attribute; default the ``m`` axis): the
  output is ``(.., (.., z, x), y)``.

Anything else is refused as MindSpore refuses it. :func:`nd_tp_layout` works on alias entries only (no shapes, no
mesh): the op's own split of each label (``k`` by ``w``'s first ``k`` alias: the partial sum) and the output's
entries. ``planner.layout_hint`` pins each input where the hint puts it and the output where this infers it, so
the data each device holds before and after the op is MindSpore's; XLA's partitioner chooses the collectives in
between (for the 2D chain of tests/planner/layout/test_nd_tp.py on 8 CPU devices: two all-gathers and two
all-to-alls, where MindSpore runs an AllGather and a ReduceScatter per layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ND_TP_KINDS = frozenset({"MatMul", "BatchMatMul"})

Entry = tuple[str, ...]


def is_nd_tp(kind: str, attrs: dict[str, Any]) -> bool:
    """Whether an op asks for MindSpore's ND tensor parallel (``add_prim_attr("enable_nd_tp", True)``)."""
    return kind in ND_TP_KINDS and attrs.get("enable_nd_tp") is True


@dataclass(frozen=True)
class NdTpLayout:
    """What an accepted ND-TP hint means: ``label_aliases`` the aliases splitting each label of the product (the
    op's device-matrix labels), ``out_entries`` the output's aliases per dimension."""

    label_aliases: tuple[tuple[str, Entry], ...]
    out_entries: tuple[Entry, ...]


def _map(entry: Entry) -> tuple[str | None, ...]:
    """MindSpore's tensor map of one dimension: an unsplit one is ``[-1]`` (here ``None``), one entry long."""
    return tuple(entry) or (None,)


def _show(*entries) -> str:
    """Entries as a layout call writes them: ``('None', ('x', 'y'))``."""
    return "(" + ", ".join("'None'" if e == (None,) else repr(e[0]) if len(e) == 1 else repr(e) for e in entries) + ")"


def _real(entry) -> Entry:
    return tuple(a for a in entry if a is not None)


def nd_tp_layout(rows: tuple[tuple, tuple], out_row: tuple, entries: tuple[tuple[Entry, ...], tuple[Entry, ...]],
                 reduce_scatter_axis: int | None = None) -> NdTpLayout | tuple[str, str]:
    """The ND-TP reading of a MatMul's input layouts: ``rows`` the inputs' labels (``i`` m, ``k`` contracted,
    ``j`` n, batch labels), ``entries`` each input dimension's aliases. Returns the layout, or (what is wrong, what
    is valid) for a StrategyError."""
    (a_row, w_row), (a, w) = rows, entries
    if len(a_row) != len(out_row):
        return (f"the 2D/3D MatMul's output has rank {len(out_row)} but x has rank {len(a_row)}",
                "Give x the output's rank (MindSpore infers the output layout from x's)")
    a_m, a_k = _map(a[a_row.index("i")]), _map(a[a_row.index("k")])
    w_k, w_n = _map(w[w_row.index("k")]), _map(w[w_row.index("j")])
    rank = len(out_row)
    if len(w_k) == 1 and len(w_n) == 1:  # 2D
        split_y = a_k[-1] == w_n[0]
        x_at = len(a_k) - (2 if split_y else 1)
        if not (x_at >= 0 and a_k[x_at] == w_k[0] and (len(a_k) == 1 or (len(a_k) == 2 and split_y))):
            return (f"the 2D MatMul's last two dimensions are split {_show(a_m, a_k)} and {_show(w_k, w_n)} "
                    "(m, k and k, n)",
                    "Split them like (m, (x, y)) and (x, y), or (m, x) and (x, y)")
        m, out_m, out_n = a_m, a_m, (w_n[0], w_k[0])
    else:  # 3D
        split_y = a_m[-1] == w_n[0]
        if len(a_k) != 1 or len(w_n) != 1 or len(w_k) != 2 or a_k[0] != w_k[0]:
            return (f"the 3D MatMul's last two dimensions are split {_show(a_m, a_k)} and {_show(w_k, w_n)} "
                    "(m, k and k, n)",
                    "Split them like ((.., z, y), x) and ((x, z), y)")
        m = a_m[:-1] if split_y else a_m
        out_m, out_n = m, w_n
    labels = {"i": _real(m), "k": _real(w_k[:1]), "j": _real(w_n)}
    for label, entry in zip(a_row, a):
        if label not in labels and label is not None:
            labels[label] = tuple(entry)
    used = [alias for entry in labels.values() for alias in entry]
    if len(used) != len(set(used)):
        return (f"the 2D/3D MatMul computes with dimensions split by {labels}, an alias on two of them",
                "Give each device-matrix axis to one dimension of the product")
    out: list[list] = [list(entry) for entry in a]  # batch dimensions as x has them
    out[out_row.index("i")], out[out_row.index("j")] = list(out_m), list(out_n)
    if len(w_k) != 1 or len(w_n) != 1:
        axis = rank - 2 if reduce_scatter_axis is None else reduce_scatter_axis
        if not 0 <= axis < rank:
            return (f"ndtp_reduce_scatter_axis is {axis}", f"Give an axis in [0, {rank - 1}]")
        out[axis].append(w_k[0])
    return NdTpLayout(tuple((l, e) for l, e in labels.items() if e), tuple(_real(e) for e in out))
