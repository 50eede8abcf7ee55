"""One rank's parallel graph as MindSpore's ``step_parallel`` leaves it, in the form its unit tests read.

MindSpore's tests check the graph a parallel compile produced through ``ParallelValidator`` (its
tests/ut/python/parallel/utils/utils.py), which reads ``_graph_executor.get_parallel_graph_info(phase)``:
``{"@graph_0": {cnode name: {"inputs": [...], "attrs": {...}}}}``. MindSpore names a cnode ``<Primitive>-<k>``,
``k`` counting the cnodes of that primitive in the graph's order; an input is another cnode by that name, a
Parameter (or graph input) by its name, a number or bool by its value and any other constant by its text
(``"(1, 0)"``). ``@graph_0`` is the graph topological sorting meets first, the root; graphpar traces a network into
one graph (Cells inlined, as MindSpore's inliner leaves them), so ``@graph_0`` is the whole graph.

:func:`parallel_graph_info` builds that dictionary from graphpar's own plan, not from a list of expected answers:
the planned graph's ops in order, with the communication MindSpore's step_parallel inserts for the strategies
graphpar chose:

* an op whose outputs are partial sums (a contracted dimension split, ``NodeStrategy.partial_axes``) is followed by
  its forward reduction, ``AllReduce`` (``op: sum``) over the ranks of those axes, or ``ReduceScatter`` when its
  output strategy keeps the output split over them;
* every edge whose producer layout differs from the layout its consumer runs in gets MindSpore's tensor
  redistribution, without AllToAll (MindSpore's default, ``enable_alltoall=False``): the dimensions to split are
  sliced by ``StridedSlice``, the dimensions to gather are gathered by ``AllGather`` (which concatenates along the
  first dimension; for another dimension MindSpore follows it by ``Split`` on the first, one ``TupleGetItem`` per
  piece, ``MakeTuple`` and ``Concat`` on the wanted one), and a split moving between dimensions is a gather then a
  slice. One value moved to one layout is moved once, whatever number of consumers read it (MindSpore merges those
  communications);
* in a training graph (a train step, or a construct taking a gradient) each trained Parameter an op reads passes
  through ``_MirrorOperator`` over the ranks holding the same slice, and when the loss op's strategy leaves
  devices repeating it, its inputs pass through ``_VirtualDiv`` (MindSpore's BackwardCommunication);
* a window op (Conv2D, Conv3D, MaxPool3D, AvgPool3D) split on its spatial dimensions first receives its
  neighbours' rows through ``NeighborExchangeV2`` and keeps only its border pads (``graphpar.dump.halo``);
* a Gather whose table is split along its gather axis is MindSpore's masked sub-graph (``graphpar.dump.gather_mask``:
  indices shifted by this rank's first row, clamped, masked, the local Gather times the mask) before its reduction;
* a random op split over ranks draws its block: its shape argument is the block's (its seeds stay the user's:
  graphpar draws the blocks of one stream, where MindSpore adds each block's index to the seeds);
* the graph ends in ``Return`` of its result (a ``MakeTuple`` of several);
* the graph's data inputs pass through ``_VirtualDataset`` (each read by a ``TupleGetItem``), as MindSpore's
  PipelineSplit inserts it in every SEMI_AUTO / AUTO graph: its layout is the dataset's (whole with
  ``full_batch``, then sliced where an op wants the input split).

Collectives carry ``group`` (``<size>-<ranks>``, graphpar's spelling: MindSpore hashes the ranks), ``rank_list``
(``"(0, 1, 2, 3)"``, the ranks of the group that holds this rank) and ``op`` for reductions. Ops carry their
primitive attributes (``transpose_a``, ``seed`` ...), and an op planned by the default (batch-parallel) rule
``gen_strategy``, the strategy MindSpore generated for it. Where graphpar's plan differs from MindSpore's (another
strategy), the graph says what graphpar does, so a MindSpore check of the other plan fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from graphpar.common.dtype import ms_name
from graphpar.dump.gather_mask import split_axis_gather
from graphpar.dump.halo import WINDOW_OPS, halo_exchange
from graphpar.ir.graph import Graph, MeshInfo, Node, Spec, Value
from graphpar.planner.strategy import strategy_text

# jnp / lax equations written directly in construct (``out1 + out2``), named as MindSpore's parser names them
_RAW_KINDS = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "RealDiv", "neg": "Neg", "max": "Maximum",
              "min": "Minimum", "exp": "Exp", "log": "Log", "tanh": "Tanh", "sqrt": "Sqrt", "pow": "Pow",
              "eq": "Equal", "ne": "NotEqual", "gt": "Greater", "lt": "Less", "ge": "GreaterEqual",
              "le": "LessEqual", "convert_element_type": "Cast", "reshape": "Reshape", "transpose": "Transpose",
              "dot_general": "MatMul", "reduce_sum": "ReduceSum", "reduce_max": "ReduceMax"}


_GATHERS = frozenset({"Gather", "SparseGatherV2"})  # split on the table's axis: graphpar.dump.gather_mask


def group_ranks(mesh: MeshInfo, axes: Sequence[str], rank: int) -> tuple[int, ...]:
    """The ranks that differ from ``rank`` only along mesh ``axes`` (row-major ranks, the first axis major), in
    the order a collective over those axes concatenates them."""
    coords = list(np.unravel_index(rank, mesh.sizes)) if mesh.sizes else []
    picked = [mesh.names.index(a) for a in axes]
    out = []
    for combo in np.ndindex(*[mesh.sizes[i] for i in picked]):
        c = list(coords)
        for i, k in zip(picked, combo):
            c[i] = k
        out.append(int(np.ravel_multi_index(c, mesh.sizes)) if mesh.sizes else 0)
    return tuple(out)


def _attr(value: Any) -> Any:
    """An attribute as MindSpore's ``GetCNodeAttrs`` gives it: bools and numbers as they are, anything else as text."""
    if isinstance(value, (bool, int, float, np.integer, np.floating, np.bool_)):
        return value.item() if isinstance(value, np.generic) else value
    return str(value)


def _const(value: Any) -> Any:
    """A constant input as MindSpore's ``GetCNodeOperandNameList`` gives it: numbers, bools and strings as they
    are, a tensor or a tuple by its text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return str(tuple(value))
    if isinstance(value, (np.generic, np.ndarray, jax.Array)):
        if not np.shape(value):
            return np.asarray(value).item()
        return f"Tensor(shape={list(np.shape(value))}, dtype={ms_name(value.dtype)})"
    return str(value)


@dataclass
class _Builder:
    """The cnodes of one rank's graph, appended in order and named as MindSpore names them."""

    mesh: MeshInfo
    rank: int
    cnodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None) -> str:
        name = f"{kind}-{self.counts.get(kind, 0)}"
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.cnodes[name] = {"inputs": list(inputs), "attrs": {k: _attr(v) for k, v in (attrs or {}).items()}}
        return name

    def collective(self, kind: str, x: str, axes: Sequence[str], **attrs: Any) -> str:
        ranks = group_ranks(self.mesh, axes, self.rank)
        group = f"{len(ranks)}-" + "_".join(str(r) for r in ranks)
        return self.add(kind, [x], {**attrs, "group": group, "rank_list": str(ranks), "rank_size": len(ranks)})

    # -- MindSpore's tensor redistribution, one step at a time ------------------------------------------------

    def strided_slice(self, x: str, shape: Sequence[int], spec: Spec) -> str:
        """Keep this rank's block of a tensor of global ``shape`` whose dimensions are now split by ``spec``
        (``shape`` is the block held before, its dimensions already split by the axes kept)."""
        coords = dict(zip(self.mesh.names, np.unravel_index(self.rank, self.mesh.sizes)))
        begin, end = [], []
        for size, axes in zip(shape, spec):
            parts, index = 1, 0
            for a in axes:
                index = index * self.mesh.size((a,)) + int(coords[a])
                parts *= self.mesh.size((a,))
            step = size // parts
            begin.append(index * step)
            end.append(index * step + step)
        return self.add("StridedSlice", [x, str(tuple(begin)), str(tuple(end)), str(tuple(1 for _ in shape))],
                        {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0,
                         "shrink_axis_mask": 0})

    def all_gather(self, x: str, dim: int, axes: Sequence[str]) -> str:
        """AllGather along ``dim``: MindSpore's AllGather stacks on the first dimension; another dimension is put
        back together by Split / TupleGetItem / MakeTuple / Concat."""
        out = self.collective("AllGather", x, axes)
        if dim == 0:
            return out
        g = self.mesh.size(axes)
        split = self.add("Split", [out, 0, g], {"axis": 0, "output_num": g})
        pieces = [self.add("TupleGetItem", [split, i]) for i in range(g)]
        tup = self.add("MakeTuple", pieces)
        return self.add("Concat", [tup, dim], {"axis": dim})

    def redistribute(self, x: str, value: Value, src: Spec, dst: Spec) -> str:
        """The ops moving ``value`` held as ``src`` into ``dst`` on this rank: slices of newly split dimensions
        first, then per dimension the gathers of the axes it loses, then the slices of axes that moved between
        dimensions (MindSpore's split / concat order, a permute being a concat and a split without AllToAll)."""
        kept, removed, added = [], [], []
        for a, b in zip(src, dst):
            k = 0
            while k < len(a) and k < len(b) and a[k] == b[k]:
                k += 1
            kept.append(a[:k])
            removed.append(a[k:])
            added.append(b[k:])
        held_before = {ax for axes in src for ax in axes}
        free = [tuple(ax for ax in axes if ax not in held_before) for axes in added]
        shape = list(value.shape)
        cur = [tuple(a) for a in src]
        if any(free):
            # newly split dimensions, sliced out of the block held now
            block = [s // self.mesh.size(axes) for s, axes in zip(shape, src)]
            x = self.strided_slice(x, block, tuple(f for f in free))
            cur = [c + f for c, f in zip(cur, free)]
        for d, gone in enumerate(removed):
            if gone:
                x = self.all_gather(x, d, gone)
                cur[d] = tuple(ax for ax in cur[d] if ax not in gone)
        rest = [tuple(ax for ax in want if ax not in cur_d) for want, cur_d in zip(dst, cur)]
        if any(rest):
            block = [s // self.mesh.size(axes) for s, axes in zip(shape, cur)]
            x = self.strided_slice(x, block, tuple(rest))
        return x


@dataclass(frozen=True)
class _Item:
    """Output ``index`` of the multi-output cnode ``op``, not read yet."""

    op: str
    index: int


_KEY = object()  # an input that is graphpar's random state, which MindSpore's graph does not show
_PRNG = ("random_seed", "random_wrap", "random_unwrap", "random_split", "random_fold_in", "random_bits")


def _prng_plumbing(graph: Graph, node: Node) -> bool:
    """JAX's PRNG-key equations (graphpar threads a key through random ops; MindSpore's random ops hold seeds)."""
    return not node.is_op and node.kind in _PRNG


def _is_key(graph: Graph, vid: int) -> bool:
    """A PRNG key, or raw key data made by the key plumbing."""
    v = graph.values[vid]
    producer = graph.producer(vid)
    return not v.is_array or (producer is not None and _prng_plumbing(graph, producer))


def _random_slice(b: _Builder, node: Node, out_spec: Spec, call: list[Any]) -> list[Any]:
    """A random op (UniformReal, Gamma ...) split: each rank draws its block, so its shape argument is the block's
    shape. Its ``seed`` / ``seed2`` stay the user's: graphpar draws each block of the one stream an unsplit op
    draws (docs/porting_from_mindspore.md), where MindSpore's UniformRealInfo adds the block's index to them, so
    a check of MindSpore's per-rank seeds fails, as it should."""
    shape = next((v for v in node.static_args.values() if isinstance(v, (tuple, list)) and len(v) == len(out_spec)),
                 None)
    if shape is None:
        return call
    text = _const(shape)
    return [_const(tuple(s // b.mesh.size(axes) for s, axes in zip(shape, out_spec))) if x == text else x
            for x in call]


def _world(mesh: MeshInfo) -> str:
    """The group of every rank (MindSpore's NeighborExchangeV2 runs in the world group)."""
    n = int(np.prod(mesh.sizes)) if mesh.sizes else 1
    return f"{n}-" + "_".join(str(r) for r in range(n))


def _kind(node: Node) -> str:
    return node.kind if node.is_op else _RAW_KINDS.get(node.kind, node.kind)


def _call_inputs(node: Node, tensors: Sequence[Any]) -> list[Any]:
    """The op's call arguments in order: its tensor inputs where they are, its static arguments (an axis, a
    permutation) as constants at their positions."""
    out: list[Any] = []
    it = iter(tensors)
    n = len(tensors) + len(node.static_args)
    for pos in range(n):
        out.append(_const(node.static_args[pos]) if pos in node.static_args else next(it))
    return out


def _own_outputs(graph: Graph, node: Node) -> int:
    """How many of ``node``'s outputs are the op's own. Under a gradient taken in construct JAX appends to an op's
    outputs the residuals its backward reads (ReLU's mask); MindSpore's backward reads the forward's values instead.
    The op's outputs are then those up to the last one a forward op or the graph's result reads (a multi-output
    op whose later outputs only the backward reads shows fewer outputs than it has)."""
    if not graph.inner_gradient or not node.is_op:
        return len(node.outputs)
    results = set(graph.outputs)
    read = [j for j, vid in enumerate(node.outputs)
            if vid in results or any(c.is_op for c, _ in graph.consumers(vid))]
    return max(read, default=0) + 1


def _loss_node(graph: Graph) -> Node | None:
    """The node MindSpore's FindLossCNode finds: the op computing the differentiated output (a train step's loss;
    for a gradient taken in construct, the forward's last op)."""
    if graph.plan.purpose == "train" and graph.outputs:
        return graph.producer(graph.outputs[0])
    ops_ = [n for n in graph.node_list() if n.is_op]
    return ops_[-1] if ops_ else None


def _backward_communication(b: _Builder, graph: Graph, node: Node, ins: list[Any], is_loss: bool,
                            mean: bool) -> list[Any]:
    """A training graph's ops before ``node`` (MindSpore's BackwardCommunication): each trained Parameter it reads
    through ``_MirrorOperator`` over the ranks holding the same slice (whose gradients its backward sums), and,
    when ``node`` is the loss and its strategy repeats over some devices, every input through ``_VirtualDiv`` by
    that repeat (the loss gradient each repeat receives is divided among them)."""
    strategy = node.strategy
    out = list(ins)
    for k, vid in enumerate(node.inputs):
        if graph.values[vid].kind != "param" or k >= len(strategy.input_specs) or not isinstance(out[k], str):
            continue
        used = {a for axes in strategy.input_spec(k) for a in axes}
        repeated = tuple(a for a in b.mesh.names if a not in used)
        if b.mesh.size(repeated) > 1:
            out[k] = b.collective("_MirrorOperator", out[k], repeated, mean_flag=mean,
                                  dev_num=b.mesh.size(repeated))
    repeat = b.mesh.n_devices // max(strategy.devices_used, 1)
    if is_loss and repeat > 1:
        out = [b.add("_VirtualDiv", [x], {"divisor": repeat}) if isinstance(x, str) else x for x in out]
    return out


def parallel_graph_info(graph: Graph, rank: int, input_names: Mapping[int, str] | None = None,
                        full_batch: bool = True, mean: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"@graph_0": {cnode name: {"inputs": [...], "attrs": {...}}}}`` of rank ``rank`` of the planned
    ``graph`` (see the module docstring). ``input_names``: graph-input value id -> the name MindSpore gives that
    graph parameter (the argument's name in ``construct``); ``full_batch``: whether each rank reads the whole
    batch (else each input is laid out as the plan's dataset layout says); ``mean``: ``gradients_mean`` (the mirror
    ops' ``mean_flag``). A train step's graph, or one whose construct takes a gradient, is a training graph: its
    ops get MindSpore's mirror and virtual-div ops."""
    training = graph.plan.purpose == "train" or graph.inner_gradient
    mesh = graph.plan.mesh
    b = _Builder(mesh if mesh is not None else MeshInfo((), ()), rank)
    names = dict(input_names or {})
    held: dict[int, tuple[Any, Spec | None]] = {}  # value id -> (what reads it, its layout on this rank)
    data = [vid for vid in graph.inputs if graph.values[vid].kind == "input"]
    for vid in graph.inputs:
        v = graph.values[vid]
        spec = graph.plan.value_specs.get(vid, tuple(() for _ in v.shape))
        if v.kind == "input":
            spec = graph.plan.input_specs.get(vid, spec) if not full_batch else tuple(() for _ in v.shape)
        held[vid] = (names.get(vid, v.name), spec)
    if data:  # MindSpore's PipelineSplit inserts it in every parallel graph, full batch or not
        vd = b.add("_VirtualDataset", [held[vid][0] for vid in data])
        for i, vid in enumerate(data):
            if graph.values[vid].consumers:
                held[vid] = (b.add("TupleGetItem", [vd, i]), held[vid][1])
    moved: dict[tuple[int, Spec], str] = {}
    getitems: dict[_Item, str] = {}

    def read(vid: int, want: Spec | None) -> Any:
        v = graph.values[vid]
        if vid not in held:  # a constant
            return _const(v.const)
        ref, spec = held[vid]
        if isinstance(ref, _Item):  # one output of a multi-output op: TupleGetItem where it is first read
            if ref not in getitems:
                getitems[ref] = b.add("TupleGetItem", [ref.op, ref.index])
            ref = getitems[ref]
        if want is None or spec is None or spec == want or not v.shape or not isinstance(ref, str):
            return ref
        if (vid, want) not in moved:
            moved[(vid, want)] = b.redistribute(ref, v, spec, want)
        return moved[(vid, want)]

    loss = _loss_node(graph) if training else None
    for node in graph.node_list():
        if _prng_plumbing(graph, node):
            continue
        strategy = node.strategy
        ins = [read(vid, strategy.input_spec(k) if strategy is not None and k < len(strategy.input_specs) else None)
               if not _is_key(graph, vid) else _KEY for k, vid in enumerate(node.inputs)]
        if training and node.is_op and strategy is not None:
            ins = _backward_communication(b, graph, node, ins, node is loss, mean)
        attrs = node.attrs
        if node.is_op and strategy is not None and node.provenance is not None and node.provenance.kind == "default":
            # no strategy given: MindSpore generates the batch-parallel one and records it on the primitive
            attrs = {**attrs, "gen_strategy": strategy_text(strategy.in_strategy())}
        halo = None
        if (node.kind in WINDOW_OPS and strategy is not None and strategy.input_specs and node.outputs
                and isinstance(ins[0], str)):
            halo = halo_exchange(node, strategy.input_spec(0), graph.values[node.inputs[0]].shape,
                                 graph.values[node.outputs[0]].shape, b.mesh, rank)
        if halo is not None:  # a window op split on its spatial dimensions: its neighbours' rows, then its own pads
            exchange, pads = halo
            ins[0] = b.add("NeighborExchangeV2", [ins[0]], {**exchange, "group": _world(b.mesh)})
            attrs = {**attrs, "pad_list": str(pads)}
        call = [x for x in _call_inputs(node, ins) if x is not _KEY]
        if strategy is not None and "seed" in attrs and "seed2" in attrs and strategy.output_specs:
            call = _random_slice(b, node, strategy.output_spec(0), call)
        masked = None
        if node.kind in _GATHERS and strategy is not None and strategy.partial_axes and strategy.input_specs:
            masked = split_axis_gather(b.add, _kind(node), call, attrs, graph.values[node.inputs[0]].shape,
                                       strategy.input_spec(0), b.mesh, rank)
        out_ref = masked if masked is not None else b.add(_kind(node), call, attrs)
        if strategy is not None and strategy.partial_axes:
            out_specs = strategy.output_specs
            scattered = tuple(a for a in strategy.partial_axes if out_specs and any(a in axes for axes in out_specs[0]))
            summed = tuple(a for a in strategy.partial_axes if a not in scattered)
            if scattered:
                out_ref = b.collective("ReduceScatter", out_ref, scattered, op="sum")
            if summed:
                out_ref = b.collective("AllReduce", out_ref, summed, op="sum")
        n_out = _own_outputs(graph, node)
        for j, vid in enumerate(node.outputs):
            if j >= n_out:
                held[vid] = (out_ref, None)
                continue
            held[vid] = (out_ref if n_out == 1 else _Item(out_ref, j), strategy.output_spec(j) if strategy else None)
    results = [read(vid, None) for vid in graph.outputs if not _is_key(graph, vid)]
    b.add("Return", results if len(results) == 1 else [b.add("MakeTuple", results)])
    return {"@graph_0": b.cnodes}

