"""Megatron's sequence parallel as a variant of the stage search's layer plan (MindFormers' ``use_seq_parallel``).

The stage search prices the repeated layer planned on a tensor group of ``tp`` devices (``stage_profile``). Between
the tensor-parallel matmuls lie the *token regions*: ops that work row by row on the layer's tokens (LayerNorm, the
residual Adds, a dropout, the bias Add after a row-parallel matmul), whose operands are the token activations
(the layer input's leading dimensions, then the hidden) or weights broadcast along them, and whose strategy splits
nothing but the token rows. A token region is either *split* (its rows over the whole tensor group: sequence
parallel, the column-parallel matmul after it all-gathers its rows, the row-parallel one before it reduce-scatters
its partial sums onto them) or *replicated* (whole on every device of the group: plain tensor parallel, an
AllReduce and the same LayerNorm on every device).

The intra-op search chooses per op, so its layer plan may be either or a mix. :func:`sequence_record` builds the
other variant of the plan as strategies to force: every token op split (or replicated), and each matmul whose
partial sums enter a token op given the ``out_strategy`` that scatters them onto the rows (or none). The profile
plans the layer again with them forced (the rest searched again around them), and flips that plan once more (the
search, re-planned around forced regions, may find a better plan of the first kind than its own: GPT-3's layer
on tp 8, whose own plan gathers the rows before each matmul, is 7 % faster re-planned around replicated LayerNorms
and then split again with the reduce-scatters forced); :func:`variants` keeps per kind the fastest, each plan is
priced as any layer, so what
sequence parallel saves (the token regions' activations divided by ``tp``) and what it costs (an AllGather and a
ReduceScatter where the AllReduce was: the same ring bytes, one more message each) are measured on the plan, not
assumed. The stage search (``planner.stages.sequence``) enumerates both variants; the chosen one's strategies go
to the strategy file (``stage_strategies``), so a run compiles the sequence split it was priced with.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from graphpar.ir.graph import Graph
from graphpar.planner.strategy_file import RecordedStrategy, StrategyFile, node_keys

MATMULS = ("MatMul", "BatchMatMul")
VARIANT = "the stage search's sequence-parallel variant"  # the forced record's name in messages


def token_prefix(graph: Graph) -> tuple[int, ...]:
    """The token dimensions of the layer: its first input's leading dimensions (the last is the hidden)."""
    for vid in graph.inputs:
        v = graph.values[vid]
        if v.kind == "input" and len(v.shape) >= 2:
            return tuple(v.shape[:-1])
    return ()


def _is_token(shape: tuple[int, ...], prefix: tuple[int, ...]) -> bool:
    return len(shape) == len(prefix) + 1 and tuple(shape[:-1]) == prefix


def token_ops(planned: Graph) -> dict[int, int]:
    """Per token op of the planned layer (module docstring), how many ways its token rows are split."""
    prefix = token_prefix(planned)
    if not prefix:
        return {}
    out = {}
    for node in planned.node_list():
        if node.kind in MATMULS or node.strategy is None or not node.outputs:
            continue
        rows = node.strategy.in_strategy()
        if rows is None or len(rows) != len(node.inputs):
            continue
        values = [planned.values[v] for v in node.inputs]
        if not all(_is_token(tuple(planned.values[v].shape), prefix) for v in node.outputs if planned.values[v].is_array):
            continue
        tokens = [i for i, v in enumerate(values) if v.is_array and v.kind not in ("param", "state")]
        if not tokens or not all(_is_token(tuple(values[i].shape), prefix) for i in tokens):
            continue
        # nothing but the token rows split: the hidden of each token operand, every dim of the broadcast weights
        if any(math.prod(row) != math.prod(row[:-1]) if i in tokens else math.prod(row) != 1
               for i, row in enumerate(rows)):
            continue
        splits = {math.prod(rows[i][:-1]) for i in tokens}
        if len(splits) == 1:
            out[node.id] = splits.pop()
    return out


def is_split(planned: Graph, tp: int) -> bool:
    """Whether the layer plan is sequence parallel: it has token ops and each splits its rows over the whole
    tensor group of ``tp`` > 1 devices."""
    ops = token_ops(planned)
    return tp > 1 and bool(ops) and all(s == tp for s in ops.values())


def _split_dim(prefix: tuple[int, ...], tp: int) -> int | None:
    """The token dimension sequence parallel splits: the first the group divides (rows of a 2-D activation)."""
    return next((d for d, n in enumerate(prefix) if n % tp == 0), None)


def sequence_record(planned: Graph, tp: int, split: bool) -> StrategyFile | None:
    """The strategies that turn the planned layer into its ``split`` (sequence parallel) or replicated variant
    (module docstring), to force on ``tp`` devices; None when the layer has no token op or the group divides no
    token dimension."""
    ops = token_ops(planned)
    prefix = token_prefix(planned)
    dim = _split_dim(prefix, tp)
    if not ops or dim is None or tp <= 1:
        return None
    keys = node_keys(planned)
    values = planned.values
    forced: dict[str, RecordedStrategy] = {}

    def record(node: Any, ins: tuple, outs: tuple | None) -> None:
        forced[keys[node.id]] = RecordedStrategy(keys[node.id], node.kind, node.instance_name, node.scope, ins, outs)

    def token_row(shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(tp if (split and d == dim) else 1 for d in range(len(shape)))

    for nid in ops:
        node = planned.nodes[nid]
        ins = tuple(token_row(tuple(values[v].shape)) if values[v].kind not in ("param", "state")
                    and _is_token(tuple(values[v].shape), prefix) else (1,) * len(values[v].shape)
                    for v in node.inputs)
        record(node, ins, None)
        for vid in node.inputs:  # a matmul whose partial sums enter the region: scattered onto the rows, or not
            producer = values[vid].producer
            if producer is None or planned.nodes[producer].kind not in MATMULS:
                continue
            p = planned.nodes[producer]
            out = _scattered(p, planned, tp, dim, split)
            if out is not False:
                record(p, p.strategy.in_strategy(), out)
    return StrategyFile(VARIANT, tp, forced, {})


def _scattered(node: Any, planned: Graph, tp: int, dim: int, split: bool) -> tuple | None | bool:
    """The ``out_strategy`` of a matmul feeding a token region: with ``split``, its partial-sum axes moved onto the
    token rows when that splits them over the whole group and nothing else (a ReduceScatter); else none (the
    AllReduce). False: the matmul is left as planned (no partial sums, or another split of its output)."""
    strategy = node.strategy
    mesh = planned.plan.mesh
    partial = mesh.size(strategy.partial_axes)
    if partial <= 1 or len(node.outputs) != 1:
        return False if strategy.out_override is None or split else None
    sizes = [mesh.size(axes) for axes in strategy.output_spec(0)]
    if not split:
        return None
    sizes[dim] *= partial
    if sizes[dim] != tp or math.prod(sizes) != tp:
        return False
    return (tuple(sizes),)


def variants(planned: Graph, tp: int, replan: Callable[[StrategyFile], Graph | None],
             time: Callable[[Graph], float]) -> dict[bool, Graph]:
    """Per kind (``is_split``), the fastest of the searched plan ``planned``, its flip and the flip's flip
    (``replan`` plans the layer with a record forced; ``time`` prices a plan), earlier ones winning ties: the same
    plans in the same order wherever it is asked, so the profile and the strategy file agree."""
    candidates = [planned]
    for _ in range(2):
        record = sequence_record(candidates[-1], tp, not is_split(candidates[-1], tp))
        flipped = None if record is None else replan(record)
        if flipped is None:  # no token region, or (``replan`` under a memory bound) no plan of that kind fits
            break
        candidates.append(flipped)
    best: dict[bool, tuple[float, Graph]] = {}
    for graph in candidates:
        kind, t = is_split(graph, tp), time(graph)
        if kind not in best or t < best[kind][0]:
            best[kind] = (t, graph)
    return {kind: graph for kind, (_, graph) in best.items()}
