"""Sharding rules as labelled dimensions, and the registry that maps a node kind to its rule.

A rule describes an op the way an einsum does: every dimension of every input and output gets a *label*; the same
label on two tensors means the dimension is split the same way on both. From that one description graphpar
derives everything MindSpore's per-op ``OperatorInfo`` classes hand-code:

* a strategy's consistency (``MatMul`` x's dim 1 and w's dim 0 share label ``k``: their splits must agree);
* the device matrix (labels in ``order``, then the repeat dimension);
* the tensor layouts of inputs and outputs;
* partial sums: a label on inputs but on no output is contracted (``k`` in MatMul), so a split on it leaves the
  output partial and the lowering's output constraint makes XLA insert the reduction;
* which dimensions may not be split (label ``None``, or a label in ``fixed``: a softmax axis, a concat axis).

``register(kind, ...)`` files a rule under a graphpar op kind (``"MatMul"``) or a jax primitive name
(``"dot_general"``); the rules themselves live in ``graphpar.planner.rules``, whose import registers them all. A
kind without a rule is planned replicated, and the fallback is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Label = str | None


@dataclass(frozen=True)
class DimSpec:
    inputs: tuple[tuple[Label, ...], ...]
    outputs: tuple[tuple[Label, ...], ...]
    order: tuple[str, ...]
    fixed: frozenset[str] = field(default_factory=frozenset)
    repeat_first: bool = False
    batch: str | None = None  # the label MindSpore's batch (default) strategy splits; None: input 0's dim 0
    residuals: int = 0  # trailing outputs that are JAX residuals for a backward, not the op's own
    # Labels a user's strategy may split but graphpar's own search never proposes: the cost model does not price
    # the collective they need (Conv2D's halo exchange on a split H or W), so the planner takes them only as asked
    # or as a decided neighbour's layout already has them (propagation's aligned candidates).
    hint_only: frozenset[str] = field(default_factory=frozenset)
    # The op's conditions on a strategy beyond one split per label (MindSpore's CheckStrategy arithmetic: Conv2D's
    # kernel/stride/pad rules for a split H or W): called with each split label's split, it returns None when the
    # splits are valid, else (what is wrong, what is valid) for the StrategyError.
    check: Callable[[dict[str, int]], tuple[str, str] | None] | None = field(default=None, compare=False)
    # What a user's strategy describes where it is not the op's tensor inputs: MindSpore's Tile takes one split
    # per element of ``multiples`` (the output's rank), each dividing the multiple, or the input's dim where the
    # multiple is 1. None: one entry per tensor input, as ``inputs``.
    # False where MindSpore's OperatorInfo infers the outputs' layouts and refuses a user's out_strategy/out_layout
    # (LayerNormInfo::CheckOutputLayout)
    takes_out_strategy: bool = True
    hint_rows: tuple[tuple[Label, ...], ...] | None = None
    hint_shapes: tuple[tuple[int, ...], ...] | None = None

    @property
    def strategy_labels(self) -> tuple[tuple[Label, ...], ...]:
        """The labelled rows a user's strategy gives one split per element of (``hint_rows``, else the inputs)."""
        return self.inputs if self.hint_rows is None else self.hint_rows

    def strategy_shapes(self, in_shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """The sizes those splits must divide (``hint_shapes``, else the inputs' shapes)."""
        return [tuple(s) for s in (in_shapes if self.hint_shapes is None else self.hint_shapes)]

    @property
    def own_outputs(self) -> tuple[tuple[Label, ...], ...]:
        """The op's own outputs, the ones a user's ``out_strategy`` names (residuals excluded)."""
        return self.outputs[:len(self.outputs) - self.residuals]

    @property
    def contracted(self) -> frozenset[str]:
        """Labels on inputs only: splitting them leaves the outputs partial."""
        ins = {l for t in self.inputs for l in t if l is not None}
        outs = {l for t in self.outputs for l in t if l is not None}
        return frozenset(ins - outs)

    @property
    def search_fixed(self) -> frozenset[str]:
        """Labels graphpar's search and propagation leave whole: the fixed ones and the hint-only ones."""
        return self.fixed | self.hint_only

    @property
    def splittable(self) -> tuple[str, ...]:
        return tuple(l for l in self.order if l not in self.search_fixed)


RuleFn = Callable[[Any, Any], "DimSpec | None"]  # (node, graph) -> DimSpec
_RULES: dict[str, RuleFn] = {}
SILENT_REPLICATED: set[str] = set()


def register(*kinds: str) -> Callable[[RuleFn], RuleFn]:
    def deco(fn: RuleFn) -> RuleFn:
        for kind in kinds:
            _RULES[kind] = fn
        return fn
    return deco


def rule_for(kind: str) -> RuleFn | None:
    """The rule registered for ``kind``, or None (planned replicated). The rule modules register themselves when
    ``graphpar.planner.rules`` is imported (this module is below them); import ``rule_for`` from there."""
    if not _RULES:
        raise RuntimeError(f"no sharding rule is registered (looking up {kind!r}): import graphpar.planner.rules, "
                           "whose modules register the rules, before planning")
    return _RULES.get(kind)


# --- builders shared by rules -------------------------------------------------------------------------------------
def shapes_of(node: Any, graph: Any) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    ins = [graph.values[v].shape for v in node.inputs]
    outs = [graph.values[v].shape for v in node.outputs]
    return ins, outs


def elementwise(in_shapes: Sequence[tuple[int, ...]], out_shapes: Sequence[tuple[int, ...]],
                fixed_axes: Sequence[int] = ()) -> DimSpec:
    """Numpy broadcasting: inputs right-aligned to the (first) output; broadcast size-1 dims stay unsplit."""
    out = out_shapes[0]
    rank = len(out)
    labels = tuple(f"d{i}" for i in range(rank))
    inputs = []
    for shape in in_shapes:
        offset = rank - len(shape)
        row = []
        for j, size in enumerate(shape):
            d = j + offset
            row.append(labels[d] if 0 <= d < rank and (size == out[d] or out[d] == 1) else None)
        inputs.append(tuple(row))
    outputs = []
    for shape in out_shapes:
        outputs.append(tuple(labels[i] if i < rank and shape[i] == out[i] else None for i in range(len(shape)))
                       if len(shape) == rank else tuple(None for _ in shape))
    fixed = frozenset(labels[a % rank] for a in fixed_axes) if rank else frozenset()
    return DimSpec(tuple(inputs), tuple(outputs), labels, fixed)


def reduction(in_shape: tuple[int, ...], axes: Sequence[int], keep_dims: bool, extra_inputs: int = 0) -> DimSpec:
    rank = len(in_shape)
    axes = {a % rank for a in axes} if rank else set()
    labels = tuple(f"d{i}" for i in range(rank))
    out = tuple((None if i in axes else labels[i]) for i in range(rank) if keep_dims or i not in axes)
    return DimSpec((labels,) + ((),) * extra_inputs, (out,), labels)


def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """Pair consecutive groups of ``src`` and ``dst`` dims with equal products (row-major reshape)."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        pi = pj = 1
        if i < len(src):
            gi.append(i); pi = src[i]; i += 1
        if j < len(dst):
            gj.append(j); pj = dst[j]; j += 1
        while pi != pj:
            if pi < pj and i < len(src):
                gi.append(i); pi *= src[i]; i += 1
            elif pj < pi and j < len(dst):
                gj.append(j); pj *= dst[j]; j += 1
            else:
                return None
        # size-1 dims that follow belong to no group's product; attach them to the current group
        while i < len(src) and src[i] == 1 and (j >= len(dst) or dst[j] != 1):
            gi.append(i); i += 1
        while j < len(dst) and dst[j] == 1 and (i >= len(src) or src[i] != 1):
            gj.append(j); j += 1
        groups.append((gi, gj))
    return groups


def reshape(src: tuple[int, ...], dst: tuple[int, ...], n_inputs: int = 1) -> DimSpec | None:
    """A split may ride on the major dim of each merged/split group (contiguous row-major blocks)."""
    groups = reshape_groups(tuple(src), tuple(dst))
    if groups is None:
        return None
    in_row: list[Label] = [None] * len(src)
    out_row: list[Label] = [None] * len(dst)
    order = []
    for k, (gi, gj) in enumerate(groups):
        gi_sized = [i for i in gi if src[i] != 1]
        gj_sized = [j for j in gj if dst[j] != 1]
        if not gi_sized or not gj_sized:
            continue
        label = f"g{k}"
        in_row[gi_sized[0]] = label
        out_row[gj_sized[0]] = label
        order.append(label)
    return DimSpec((tuple(in_row),) + ((),) * (n_inputs - 1), (tuple(out_row),), tuple(order))


def replicated(in_shapes: Sequence[tuple[int, ...]], out_shapes: Sequence[tuple[int, ...]]) -> DimSpec:
    """No dimension may be split: the op runs whole on every device."""
    return DimSpec(tuple(tuple(None for _ in s) for s in in_shapes),
                   tuple(tuple(None for _ in s) for s in out_shapes), ())


def carry_reshape(src: tuple[int, ...], dst: tuple[int, ...], sizes: dict[str, int],
                  spec: Sequence[tuple[str, ...]]) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]:
    """MindSpore's ReshapeInfo: the layout of a reshape's output given its input layout ``spec``.

    Returns ``(input spec kept, output spec)``. Within each group of dims the reshape merges or splits (row-major),
    a device's block stays one contiguous run exactly when every dim but the last split one is split completely
    (blocks of size 1); so the axes of a group are carried in order, major dim first, as long as that holds, and
    dealt out to the group's output dims the same way. Axes that cannot be carried are dropped from the kept input
    spec (the edge into the reshape gathers them: a priced, reported redistribution).
    """
    kept: list[tuple[str, ...]] = [tuple(a) for a in spec]
    out: list[tuple[str, ...]] = [() for _ in dst]
    groups = reshape_groups(tuple(src), tuple(dst))
    if groups is None:
        return tuple(() for _ in src), tuple(out)

    def size(axes: Sequence[str]) -> int:
        prod = 1
        for a in axes:
            prod *= sizes[a]
        return prod

    for gi, gj in groups:
        run: list[tuple[str, int]] = []  # (axis, input dim) in carry order
        open_ = True
        for i in gi:
            axes = kept[i]
            if not open_:
                kept[i] = ()
                continue
            run += [(a, i) for a in axes]
            if src[i] != 1 and size(axes) != src[i]:
                open_ = False  # a partial split: later dims of the group cannot be carried
        pos = 0
        for j in gj:
            if dst[j] == 1:
                continue
            acc, taken = 1, []
            while pos < len(run) and dst[j] % (acc * sizes[run[pos][0]]) == 0:
                acc *= sizes[run[pos][0]]
                taken.append(run[pos][0])
                pos += 1
            out[j] = tuple(taken)
            if acc != dst[j]:
                break
        for a, i in run[pos:]:  # not carried: the input must arrive without them
            kept[i] = tuple(x for x in kept[i] if x != a)
    return tuple(kept), tuple(out)


def with_repeat(core: tuple[int, ...], repeat: int, repeat_first: bool) -> tuple[int, ...]:
    """A device matrix: the labels' splits ``core`` in device-matrix order and, when devices repeat, the repeat
    dimension (first for OneHot-like rules, else last). The one place MindSpore's repeat dimension is placed."""
    if repeat <= 1:
        return tuple(core)
    return (repeat,) + tuple(core) if repeat_first else tuple(core) + (repeat,)
