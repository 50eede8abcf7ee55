"""SAPP's partition of MatMuls around user strategies: MindSpore's "interfered SAPP" (``MS_INTERFERED_SAPP=1``).

MindSpore's ``recursive_programming`` drops every ``shard()`` strategy unless the environment variable
``MS_INTERFERED_SAPP`` is ``1`` (``rec_parse_graph.cc``, ``MakeNewOperator``). With it, an op with an ``in_strategy``
(or ``out_strategy``) keeps it: SAPP skips that op when it partitions and, in each of its ``log2(n)`` 2-part cuts,
charges the ops around it a redistribution for every edge whose cut differs from the user's
(``rec_partition.cc``, ``PartitionForAllDevices``; ``DecomposeStrategy`` turns the user's split into one halving per
cut, the dimensions in (n, c, h, w) order). The ops next to a user strategy are therefore cut to match it.

graphpar builds that partition for the MatMuls (``rec_cost.cc``, ``CostMatMul``) and fixes each MatMul to it, as a
constraint of the search (like a ``shard()`` hint); the other ops are searched around them. Per cut, for a MatMul
whose local extents are ``i x k`` by ``k x j``:

* cutting ``i`` costs ``j * k / 2`` times ``rp_matmul_mem_coef`` (``_set_rp_matmul_mem_coef``, MindSpore's default
  0.1), cutting ``j`` costs ``i * k / 2``, ``k`` ``i * j / 2`` (never ``j`` and ``k`` in the same MatMul), no cut
  the smallest of the three squared over 25; a dimension is cut only while it is even;
* a neighbour already cut in this round (the user's ops, the ``_VirtualDataset`` that feeds the dataset, the
  MatMuls partitioned before this one) adds ``16 x`` the size of the MatMul's first input (an input edge) or of its
  output (an output edge) when the halving it gives that edge is not this cut's; neighbours are found through the
  ops SAPP eliminates from its graph (element-wise ops, casts, activations, reshapes, ...), and an edge counts only
  where both ends have the same shape (``ONLY_REDIST_WITH_SAME_SHAPE``);
* the cheapest wins (the first of i, j, k, none on a tie); the ``_VirtualDataset`` is cut first (batch parallel:
  its first input's leading even dimension), then the MatMuls from the inputs to the outputs.

Not built here: SAPP's own cost models of the other kinds it partitions (convolutions, pooling, BatchNorm, the
losses) and its generation of every other op's strategy from its neighbours (``rec_generate_strategy.cc``): those
ops are searched, and do not count as neighbours of a MatMul. Without ``MS_INTERFERED_SAPP`` graphpar's
``recursive_programming`` keeps the user's strategies and searches the rest (docs/porting_from_mindspore.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from graphpar._logging import notice_once
from graphpar.ir.graph import Graph, Node

REDIS_COEF = 16  # rec_cost.h: a mismatched edge costs this many times its tensor's size
REPLICATE_BELOW = 25  # rec_cost.h: the no-cut cost is the smallest cut's cost squared over this

# MindSpore's op names that SAPP eliminates from its graph (rec_parse_graph.h EliminateOpType, through DictOpType):
# a MatMul's neighbours are found across them
ELIMINATED = frozenset({
    "ReLU", "SiLU", "Sigmoid", "HSigmoid", "GeLU", "GELU", "FastGeLU", "FastGelu", "Tanh", "Softplus", "Softsign",
    "SigmoidCrossEntropyWithLogits", "Log", "Exp", "Add", "TensorAdd", "AddN", "Sub", "Mul", "Div", "RealDiv",
    "BiasAdd", "Squeeze", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean", "Cast", "Reshape", "Gather",
    "GatherV2", "ArgMaxWithValue", "ArgMinWithValue", "Softmax", "LogSoftmax", "OneHot", "ExpandDims",
    "StridedSlice", "CumSum", "LayerNorm", "RmsNorm", "Flatten", "BatchMatMul", "FlashAttentionScore", "PadV3",
    "GatherD", "Split", "Transpose", "Hypot", "Sqrt", "Neg", "Pow", "Cos", "Sin", "Sinh", "Tan", "Square", "Abs",
    "Erf", "Erfc", "Elu", "Floor", "Ceil", "FloorDiv", "FloorMod", "Mod", "Greater", "GreaterEqual", "Less",
    "LessEqual", "Maximum", "Minimum", "Equal", "NotEqual", "Reciprocal", "Round", "Rsqrt", "Sign", "Select",
    "Concat", "Tile", "Stack", "Dropout", "DropoutDoMask", "MaskedFill", "ZerosLike", "OnesLike", "DivNoNan",
    "LogicalNot", "LogicalAnd", "LogicalOr", "Atan", "Atanh", "Asin", "Asinh", "Acos", "Acosh", "Trunc", "Lgamma",
    "Expm1", "Log1p", "HSwish", "StandAlone", "BatchParallel"})

Halving = tuple[float, float, float, float]  # one cut's factor per (n, c, h, w): 0.5 where halved, else 1
_WHOLE: Halving = (1.0, 1.0, 1.0, 1.0)
# the (input 0, input 1, output) halvings of each MatMul cut (rec_cost.cc CostMatMul::GetOptimalStr)
_MODES: dict[str, tuple[Halving, Halving, Halving]] = {
    "i": ((1, 1, 0.5, 1), _WHOLE, (1, 1, 0.5, 1)),
    "j": (_WHOLE, (1, 1, 1, 0.5), (1, 1, 1, 0.5)),
    "k": ((1, 1, 1, 0.5), (1, 1, 0.5, 1), _WHOLE),
    "none": (_WHOLE, _WHOLE, _WHOLE),
}


@dataclass(frozen=True)
class Neighbour:
    """One node of SAPP's graph as its neighbours see it in one cut: the halving of its first input and of its
    output (``StrategyRec``'s ``inputTensor[0]`` and ``outputTensor``)."""

    first_input: Halving
    output: Halving


def four_d(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape of rank <= 4 as SAPP holds it, (n, c, h, w) with leading ones."""
    return (1,) * (4 - len(shape)) + tuple(shape)


def decompose(splits: Sequence[int]) -> list[Halving]:
    """``DecomposeStrategy``: a split per (n, c, h, w) as one halving per cut, n's first, then c's, h's, w's."""
    out: list[Halving] = []
    for d, split in enumerate(four_d(splits)):
        while split > 1:
            out.append(tuple(0.5 if e == d else 1.0 for e in range(4)))
            split //= 2
    return out


def _differs(a: Halving, b: Halving) -> bool:
    return any(int(1 / x) != int(1 / y) for x, y in zip(a, b))


def _at(halvings: list[Halving], loop: int) -> Halving:
    return halvings[loop] if loop < len(halvings) else _WHOLE


def _logical(node: Node, k: int, shape: Sequence[int]) -> tuple[int, ...]:
    """A MatMul input's shape as SAPP reads it: a transposed operand swapped back (``Complete2DInputs``)."""
    flag = ("transpose_a", "transpose_b")[k]
    return tuple(reversed(shape)) if node.attrs.get(flag, False) else tuple(shape)


def is_matmul(node: Node, graph: Graph) -> bool:
    return (node.kind == "MatMul" and node.strategy is None and len(node.inputs) >= 2
            and all(len(graph.values[v].shape) == 2 for v in node.inputs[:2]))


class _SappGraph:
    """SAPP's graph around the MatMuls: its nodes are the MatMuls, the ops with a user strategy and the dataset
    (``_VirtualDataset``, key -1); every other op is eliminated and its edges joined across it."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.dataset = [v for v in graph.inputs if graph.values[v].kind == "input" and graph.values[v].is_array]

    def is_node(self, node: Node) -> bool:
        return node.strategy is not None or is_matmul(node, self.graph)

    def producers(self, vid: int) -> list[tuple[int, tuple[int, ...]]]:
        """The SAPP nodes whose output reaches value ``vid`` across eliminated ops, with their output's shape."""
        out, seen, stack = [], set(), [vid]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            value = self.graph.values[v]
            if value.producer is None:
                if self.dataset and value.kind == "input":  # an output of the _VirtualDataset: its first one's shape
                    out.append((-1, four_d(self.graph.values[self.dataset[0]].shape)))
                continue
            node = self.graph.nodes[value.producer]
            if self.is_node(node):
                out.append((node.id, four_d(value.shape)))
            elif node.kind in ELIMINATED:
                stack.extend(u for u in node.inputs if self.graph.values[u].is_array)
        return out

    def consumers(self, vid: int) -> list[Node]:
        """The SAPP nodes that read value ``vid`` across eliminated ops."""
        out, seen, stack = [], set(), [vid]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            for node, _ in self.graph.consumers(v):
                if self.is_node(node):
                    out.append(node)
                elif node.kind in ELIMINATED:
                    stack.extend(node.outputs)
        return list({n.id: n for n in out}.values())


def _input_shapes(node: Node, graph: Graph) -> list[tuple[int, ...]]:
    shapes = [graph.values[v].shape for v in node.inputs if graph.values[v].is_array]
    if is_matmul(node, graph):
        return [four_d(_logical(node, k, s)) for k, s in enumerate(shapes[:2])]
    return [four_d(s) for s in shapes]


@dataclass(frozen=True)
class _Fixed:
    """A user strategy as SAPP reads it: per cut, the halving of its first input and of its output."""

    first_input: list[Halving]
    output: list[Halving]

    def at(self, loop: int) -> Neighbour:
        return Neighbour(_at(self.first_input, loop), _at(self.output, loop))


def _fixed(node: Node) -> _Fixed | None:
    """``node``'s strategy as SAPP's interfered node (None where SAPP cannot hold it: more than 4 dimensions)."""
    strategy = node.strategy
    in_strategy = strategy.in_strategy()
    if not in_strategy or not node.outputs or any(len(s) > 4 for s in in_strategy):
        return None
    first = list(in_strategy[0])
    if node.kind == "MatMul" and node.attrs.get("transpose_a", False):
        first = first[::-1]  # HandleMatMulTranspose
    out_spec = strategy.output_spec(0)
    if len(out_spec) > 4:
        return None
    out = [strategy.mesh.size(axes) for axes in out_spec]
    return _Fixed(decompose(first), decompose(out))


def _matmul_cut(extents: tuple[int, int, int], cut_k: bool, cut_j: bool, costs: dict[str, float],
                coef: float) -> str:
    """The cut of one MatMul in one round: ``costs`` holds each cut's redistribution, added to its own cost."""
    i, k, j = extents
    own = {"i": j * k / 2 * coef, "j": i * k / 2, "k": i * j / 2}
    allowed = {"i": i >= 2 and i % 2 == 0, "j": j >= 2 and j % 2 == 0 and not cut_k,
               "k": k >= 2 and k % 2 == 0 and not cut_j}
    total = {c: own[c] + costs[c] for c in ("i", "j", "k") if allowed[c]}
    total["none"] = min(own.values()) ** 2 / REPLICATE_BELOW + costs["none"]
    order = ("i", "j", "k", "none")
    return min((c for c in order if c in total), key=lambda c: (total[c], order.index(c)))


def partition_matmuls(graph: Graph, n_devices: int, mem_coef: float) -> dict[int, tuple[tuple[int, ...], ...]]:
    """SAPP's strategy of every 2-D MatMul without a strategy, with the ops that have one as SAPP's interfered
    nodes (see the module docstring): node id -> ``((a, b), (c, d))`` as ``shard()`` takes it."""
    matmuls = [n for n in graph.node_list() if is_matmul(n, graph)]
    if not matmuls:
        return {}
    loops = int(math.log2(n_devices)) if n_devices >= 1 else 0
    if 2 ** loops != n_devices:
        notice_once(f"sapp-partition:{n_devices}", f"MS_INTERFERED_SAPP: SAPP partitions {n_devices} devices only "
                    "as a power of two; graphpar searches the MatMuls as recursive_programming does without it",
                    logging.WARNING)
        return {}
    sapp = _SappGraph(graph)
    fixed = {n.id: f for n in graph.node_list() if n.strategy is not None and (f := _fixed(n)) is not None}
    shapes = {n.id: _input_shapes(n, graph) for n in matmuls}
    splits = {n.id: [1, 1, 1] for n in matmuls}  # i, k, j
    producers = {n.id: [sapp.producers(v) for v in n.inputs[:2]] for n in matmuls}
    consumers = {n.id: sapp.consumers(n.outputs[0]) for n in matmuls}
    dataset = four_d(graph.values[sapp.dataset[0]].shape) if sapp.dataset else None
    data_split = [1, 1, 1, 1]
    for loop in range(loops):
        known: dict[int, Neighbour] = {nid: f.at(loop) for nid, f in fixed.items()}
        if dataset is not None:  # CostBatchParallel: the first even dimension of its first input
            local = [s // p for s, p in zip(dataset, data_split)]
            dim = next((d for d, s in enumerate(local) if s >= 2 and s % 2 == 0), None)
            if dim is not None:
                data_split[dim] *= 2
            cut = tuple(0.5 if d == dim else 1.0 for d in range(4))
            known[-1] = Neighbour(cut, cut)
        for node in matmuls:
            si, sk, sj = splits[node.id]
            (_, _, i, k), (_, _, _, j) = shapes[node.id]
            local = (i // si, k // sk, j // sj)
            first_size = local[0] * local[1]
            out_size = local[0] * local[2]
            out_shape = four_d((i, j))
            costs = {}
            for cut, (m0, m1, m_out) in _MODES.items():
                cost = 0.0
                for k_in, mode in ((0, m0), (1, m1)):
                    for nid, shape in producers[node.id][k_in]:
                        if nid in known and shape == shapes[node.id][k_in] and _differs(known[nid].output, mode):
                            cost += first_size * REDIS_COEF
                for consumer in consumers[node.id]:
                    if consumer.id in known and out_shape in _input_shapes(consumer, graph) and _differs(
                            known[consumer.id].first_input, m_out):
                        cost += out_size * REDIS_COEF
                costs[cut] = cost
            cut = _matmul_cut(local, sk > 1, sj > 1, costs, mem_coef)
            m0, m1, m_out = _MODES[cut]
            if cut == "i":
                splits[node.id][0] *= 2
            elif cut == "j":
                splits[node.id][2] *= 2
            elif cut == "k":
                splits[node.id][1] *= 2
            known[node.id] = Neighbour(m0, m_out)
    out = {}
    for node in matmuls:
        si, sk, sj = splits[node.id]
        a = (sk, si) if node.attrs.get("transpose_a", False) else (si, sk)
        b = (sj, sk) if node.attrs.get("transpose_b", False) else (sk, sj)
        out[node.id] = (a, b)
    return out
