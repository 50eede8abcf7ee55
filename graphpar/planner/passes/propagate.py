"""Pass ``propagate``: MindSpore's sharding propagation (AUTO_PARALLEL, search_mode="sharding_propagation").

Reads: the user strategies (``apply_hints`` ran first), the dataset layouts of graph inputs, rules and shapes.
Adds: a strategy on every node reachable from a configured node, with provenance "propagated from X at cost C" and
the cost breakdown of the choice (``graphpar.planner.cost``).

The walk's order is a setting (``set_auto_parallel_context(propagation_order=...)``, graphpar's own key). By default
(``"hints_first"``) breadth first from every configured node at once, in graph order, their layouts and the dataset's
known from the start; then from the dataset to what the hints did not reach (fewer bytes on graphpar's GPT:
docs/porting_from_mindspore.md). ``"mindspore"``: one walk per configured node, in MindSpore's order
(``propagation_order``: by operator name, the dataset last; consumers before producers; a consumer with several input
edges waits for them; a configured layout priced once its walk begins, the dataset's in its walk). Each undecided
neighbour of a decided node is priced, for each of its strategies on the mesh, with the one cost model: the
redistribution (forward and backward, wire bytes) on every edge to a decided neighbour or a graph input, and the
op's own collectives and compute (:func:`~graphpar.planner.cost.op_cost`). The choice follows MindSpore's
``Edge::GetNextOpStrategyByPrevOpStrategy WithMiniComm``: candidates with zero edge cost first (forward
redistribution, a slice being free, as MindSpore counts it, plus the gathers an undecided consumer could not avoid),
then the least communication (edges forward and backward + the op's own collectives, less the AllReduce turned
ReduceScatter when a partial sum is sliced; the op's Parameters' gradient reductions left out, as MindSpore's
``CompareSwcCost`` compares the op's ``communication_without_parameter_``: a Conv2D reached from a data-parallel
neighbour stays data parallel rather than splitting its weight), then the least computation; when no candidate has a
free edge, the same order. (MindSpore sorts its zero tier by computation alone, but its edge cost counts a slice as
free both ways; here the backward gather of a sliced cotangent is priced, and the least computation decides among
candidates equal in communication: ``ReLU`` after ``MatMul ((2, 4), (4, 1))`` is ``(2, 4)`` as MindSpore documents,
a residual ``Add`` is not split beyond what its neighbours use.) In the loss tail (:func:`loss_tail`: ops with no
Parameter read at or after them, the loss layer), the number of collectives decides before computation: a split
there carries to no op whose work it would share, so splitting a replicated input trades a few elementwise FLOPs for
more collectives (a sliced AllReduce costs what ReduceScatter + AllGather cost, so the cotangent's AllGather is one
more message, and the loss's mean becomes a scalar AllReduce): the MSE loss after a row-parallel MatMul keeps that
MatMul's replicated layout, as XLA does for a JAX user's program. Remaining ties keep the splits the neighbour
already has, then graph order. Ops whose layout follows their input (Reshape, Depend, ``graphpar.planner.follow``)
carry that layout as soon as their input is decided. The edges walked are MindSpore's cost-graph edges
(``follow.linked``): not a Depend's second input, not one Reshape to another. Configured nodes are never changed: a
conflict becomes a redistribution, priced and reported. The dataset (MindSpore's ``_VirtualDataset``, a configured
op under sharding propagation, holding the dataset strategy: the batch split, or whole under ``full_batch``) walks
last, from the ops reading a network input that nothing reached yet. A network without any ``shard()`` propagates
from the dataset alone. The ops nothing reaches get every split
1, MindSpore's first generated strategy (``CostGraph::StrategyPropagate``); Reshape, Depend and ops without a rule
are left to ``default_strategies``.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from graphpar.errors import StrategyError
from graphpar.ir.graph import Graph, Node, Provenance
from graphpar.planner.cost import ZERO, Cost, grad_values, op_cost, redistribution_cost, reduce_scatter_saving
from graphpar.planner.dims import shapes_of
from graphpar.planner.follow import (data_inputs, follow_strategy, follows_input, input_for_output, linked,
                                    value_layout)
from graphpar.planner.layout_hint import aligned_strategies
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.passes.elementwise_follow import follow_consumers
from graphpar.planner.passes.parameters import PIN_KIND
from graphpar.planner.passes.propagation_order import DATASET, Dataset, MindSporeWalks, dataset_readers, unreached
from graphpar.planner.strategy import NodeStrategy, Spec

_EPS = 1e-6


@dataclass(frozen=True)
class _Local:
    """What pricing ``node``'s candidates reads of the graph around it, gathered once per node (it does not depend
    on the candidate). The choice reads nothing else (the op's own communication and FLOPs follow from the key too;
    its memory terms may not, and are priced per node), so nodes with equal :attr:`key` (the layers of a deep
    network) get the same choice, priced once.

    ``ins``: per input edge whose layout is known, ``(index, value, src layout, needs grad, producer strategy or
    None, from source)``; ``outs``: per output, ``(index, value, needs grad, decided consumers as (dst layout,
    is source), undecided consumers as (dims row, fixed labels))``; ``reduced``: per Parameter input, the mesh axes
    another consumer already reduces its gradient over."""

    ins: tuple
    outs: tuple
    reduced: dict[int, frozenset[str]]
    key: tuple


def _value_key(value) -> tuple:
    # what the cost model reads of a value: shape, element type (itemsize, floating or not), kind (Parameter)
    return (value.shape, value.dtype, value.kind)


def _local(node: Node, graph: Graph, ctx: PlanContext, strategies: dict[int, NodeStrategy], source: Node,
           grads: frozenset[int], lookahead: bool = True, inputs: Mapping[int, Spec] | None = None) -> _Local:
    values = graph.values
    inputs = ctx.input_specs if inputs is None else inputs
    ins, in_keys = [], []
    reads = data_inputs(node)
    for i, vid in enumerate(node.inputs):
        value = values[vid]
        if i not in reads:  # a Depend's ordering-only input: taken as it arrives, no edge
            continue
        src = value_layout(graph, vid, strategies, inputs)
        if src is None and value.kind == "param":
            src = _param_layout(graph, vid, node, strategies)
        grad = vid in grads
        if src is None or not value.is_array:
            in_keys.append((_value_key(value), grad))  # op_cost still reads it
            continue
        producer = strategies[value.producer] if value.producer is not None else None
        from_source = value.producer == source.id
        ins.append((i, value, src, grad, producer, from_source))
        in_keys.append((_value_key(value), grad, src, producer.partial_axes if producer is not None else None,
                        from_source))
    outs, out_keys = [], []
    for j, vid in enumerate(node.outputs):
        value = values[vid]
        decided, ahead = [], []
        if value.is_array:
            for consumer, k in graph.consumers(vid):
                if k not in data_inputs(consumer):
                    continue
                s = strategies.get(consumer.id)
                if s is not None:
                    decided.append((s.input_spec(k), consumer.id == source.id))
                elif lookahead and not follows_input(consumer):
                    dims = ctx.dims(consumer, graph)
                    if dims is not None:
                        ahead.append((dims.inputs[k], dims.fixed))
        outs.append((j, value, vid in grads, tuple(decided), tuple(ahead)))
        out_keys.append((_value_key(value), vid in grads, tuple(decided), tuple(ahead)))
    reduced = _grad_reduced(graph, node, strategies)
    key = (tuple(in_keys), tuple(out_keys), tuple(reduced.get(vid) for vid in node.inputs))
    return _Local(tuple(ins), tuple(outs), reduced, key)


def _edges(local: _Local, cand: NodeStrategy, mesh) -> tuple[Cost, Cost, int]:
    """(cost of all decided edges, their forward part alone, split changes on the edges with the source node).

    The forward part is what MindSpore's edge cost counts (a slice is free both ways there): the candidates whose
    forward part is zero are MindSpore's "zero communication" tier."""
    total = edge = ZERO
    changes = 0
    for i, value, src, grad, producer, from_source in local.ins:
        dst = cand.input_spec(i)
        c = redistribution_cost(value, src, dst, mesh, needs_grad=grad)
        saved = 0.0
        if producer is not None:
            saved = reduce_scatter_saving(producer, value, src, dst, mesh)
        total = total + c + Cost(-saved)
        edge = edge + redistribution_cost(value, src, dst, mesh, training=False)
        if from_source:
            changes += sum(1 for a, b in zip(src, dst) if a and a != b)
    for j, value, grad, decided, _ in local.outs:
        if not decided:
            continue
        src = cand.output_spec(j)
        for dst, is_source in decided:
            c = redistribution_cost(value, src, dst, mesh, needs_grad=grad)
            saved = Cost(-reduce_scatter_saving(cand, value, src, dst, mesh))
            total = total + c + saved
            edge = edge + redistribution_cost(value, src, dst, mesh, training=False)
            if is_source:
                changes += sum(1 for a, b in zip(dst, src) if a and a != b)
    return total, edge, changes


def _param_layout(graph: Graph, vid: int, node: Node, strategies: dict[int, NodeStrategy]):
    """The layout a Parameter is wanted in by another decided consumer (``place_parameters`` stores it in one
    layout: a different one here is a redistribution), or None."""
    for consumer, k in graph.consumers(vid):
        if consumer.id != node.id and consumer.id in strategies:
            return strategies[consumer.id].input_spec(k)
    return None


def _grad_reduced(graph: Graph, node: Node, strategies: dict[int, NodeStrategy]) -> dict[int, frozenset[str]]:
    """Per Parameter input of ``node``: the mesh axes another decided consumer already reduces its gradient over."""
    out: dict[int, frozenset[str]] = {}
    for vid in node.inputs:
        if graph.values[vid].kind != "param":
            continue
        axes: set[str] = set()
        for consumer, k in graph.consumers(vid):
            s = strategies.get(consumer.id) if consumer.id != node.id else None
            if s is None:
                continue
            carried = set(s.dims.inputs[k])
            axes.update(a for l, ax in s.label_axes if l not in carried for a in ax)
        if axes:
            out[vid] = frozenset(axes)
    return out


def _lookahead(local: _Local, cand: NodeStrategy, mesh) -> Cost:
    """Forward gathers an undecided consumer cannot avoid: the dims of ``cand``'s outputs it can never split (a
    LayerNorm's normalised axis, a Softmax axis; not the hint-only ones, H and W of a convolution or a pooling,
    which propagation carries in from a neighbour as MindSpore's does). Without it a split that is free here (slicing) is chosen and paid
    for one op later (the residual Add split on the hidden dimension ahead of a LayerNorm)."""
    cost = ZERO
    for j, value, _, _, ahead in local.outs:
        if not ahead:
            continue
        spec = cand.output_spec(j)
        if not any(spec):
            continue
        for row, fixed in ahead:
            target = tuple(() if (label is None or label in fixed) else axes for label, axes in zip(row, spec))
            if target != spec:
                cost = cost + redistribution_cost(value, spec, target, mesh, training=False)
    return cost


def breakdown(edges: Cost, own: Cost) -> dict[str, float]:
    """The cost record kept in provenance: edge and op communication, messages, FLOPs, memory (per device)."""
    return {"edge_bytes": edges.comm_bytes, "op_bytes": own.comm_bytes, "messages": edges.messages + own.messages,
            "flops": own.flops, "memory_bytes": own.memory_bytes}


Choice = tuple[NodeStrategy, Cost, Cost]


def loss_tail(graph: Graph) -> frozenset[int]:
    """Ids of the nodes that read no Parameter and whose outputs reach only such nodes (or the graph's outputs):
    the loss layer, and whatever else ends the step without meeting a weight. One pass in reverse graph order."""
    tail: set[int] = set()
    for node in reversed(graph.node_list()):
        if any(graph.values[v].kind == "param" for v in node.inputs):
            continue
        if all(c.id in tail for v in node.outputs for c, _ in graph.consumers(v)):
            tail.add(node.id)
    return frozenset(tail)


def _aligned(node: Node, graph: Graph, dims, local: _Local, cands: tuple, mesh) -> tuple[NodeStrategy, ...]:
    """The strategies that keep a decided neighbour's layout (``layout_hint.aligned_strategies``) which no
    enumerated candidate has, after them (a tie keeps the enumerated one)."""
    rows = [(dims.inputs[i], src) for i, _, src, *_ in local.ins]
    rows += [(dims.outputs[j], spec) for j, _, _, decided, _ in local.outs for spec, _ in decided]
    ins, outs = shapes_of(node, graph)
    known = {(c.input_specs, c.output_specs) for c in cands}
    extra = []
    for cand in aligned_strategies(dims, rows, ins, outs, mesh):
        if (cand.input_specs, cand.output_specs) not in known:
            known.add((cand.input_specs, cand.output_specs))
            extra.append(cand)
    return tuple(extra)


def choose(node: Node, graph: Graph, ctx: PlanContext, strategies: dict[int, NodeStrategy], source: Node,
           grads: frozenset[int], memo: dict[tuple, tuple] | None = None,
           tail: frozenset[int] = frozenset(), inputs: Mapping[int, Spec] | None = None) -> Choice | None:
    """The candidate MindSpore's edge selection picks for ``node`` (see the module docstring), with its edge and
    own costs. ``memo``: choices (candidate and edge costs) already made for nodes of the same kind, rule, shapes and
    neighbourhood (:class:`_Local`), reused; the op's own cost is priced for each node."""
    cands = ctx.candidates(node, graph)
    dims = ctx.dims(node, graph)
    if dims is None:
        return None
    local = _local(node, graph, ctx, strategies, source, grads, inputs=inputs)
    in_tail = node.id in tail
    key = (node.kind, dims, local.key, in_tail)
    mesh = ctx.mesh
    if memo is not None and key in memo:
        # the choice and its edges follow from the key; the op's own cost is priced for this node, as its memory
        # terms (what the backward pass keeps, a shared Parameter's readers) read the graph beyond the key
        cand, edges = memo[key]
        if cand is None:
            return None
        return cand, edges, op_cost(graph, node, cand, mesh, needs_grad=grads, grad_reduced=local.reduced)
    cands = cands + _aligned(node, graph, dims, local, cands, mesh)
    params = frozenset(v for v in node.inputs if graph.values[v].kind == "param")
    no_params = grads - params
    best_key, best = None, None
    for index, cand in enumerate(cands):
        edges, forward, changes = _edges(local, cand, mesh)
        ahead = _lookahead(local, cand, mesh)
        own = op_cost(graph, node, cand, mesh, needs_grad=grads, grad_reduced=local.reduced)
        # compared without the Parameters' gradient reductions (MindSpore's communication_without_parameter_)
        own_np = op_cost(graph, node, cand, mesh, needs_grad=no_params, grad_reduced=local.reduced) if params else own
        comm = round(edges.comm_bytes + ahead.comm_bytes + own_np.comm_bytes, 3)
        # in the loss tail, fewer collectives first (the module docstring); elsewhere MindSpore's order
        messages = edges.messages + ahead.messages + own.messages if in_tail else 0
        tier = 0 if forward.comm_bytes + ahead.comm_bytes < _EPS else 1
        key_ = (tier, comm, messages, round(own.flops, 3), changes, index)
        if best_key is None or key_ < best_key:
            best_key, best = key_, (cand, edges, own)
    if memo is not None:
        memo[key] = (best[0], best[1]) if best is not None else (None, None)
    return best


def propagate(graph: Graph, ctx: PlanContext, reuse_choices: bool = True) -> Graph:
    """The pass (see the module docstring). ``reuse_choices=False`` prices every node afresh instead of reusing the
    choice made for a node of the same rule, shapes and neighbourhood: the same plan, slower (the tests compare)."""
    # Pricing allocates many short-lived Cost records; with a big traced graph alive, the cyclic collector's full
    # passes over it made planning superlinear in the graph size (3x per node at 10k nodes). Nothing here builds
    # cycles, so collection waits until the pass is done.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _propagate(graph, ctx, reuse_choices)
    finally:
        if enabled:
            gc.enable()


def _propagate(graph: Graph, ctx: PlanContext, reuse_choices: bool) -> Graph:
    configured = [n for n in graph.node_list() if n.strategy is not None and n.provenance is not None
                  and n.provenance.kind == "user"]
    if not configured and not dataset_readers(graph, ctx, {}):
        raise StrategyError(
            "(network)", None, "AUTO_PARALLEL with search_mode='sharding_propagation' has nothing to propagate "
            "from: no op has a shard() strategy and no op reads a network input", None,
            "Call .shard(...) on at least one op (e.g. the first MatMul), or use "
            "search_mode='recursive_programming' or parallel_mode=ParallelMode.DATA_PARALLEL")
    grads = grad_values(graph)
    # the loss tail's collectives are the backward's: a forward-only program (no train step, no gradient inside
    # construct) has none, and its last ops are chosen as any others
    tail = loss_tail(graph) if ctx.request.purpose == "train" or graph.inner_gradient else frozenset()
    mindspore = ctx.request.propagation_order == "mindspore"
    # in MindSpore's order a configured op's layout is priced once its own walk begins (MindSpore selects it there);
    # a layout pin (functional shard / reshard) fixes a value as the dataset does an input, known from the start
    unwalked = {n.id for n in configured if n.kind != PIN_KIND} if mindspore else set()
    strategies = {n.id: n.strategy for n in graph.node_list() if n.strategy is not None and n.id not in unwalked}
    provenance: dict[int, Provenance] = {}
    memo: dict[tuple, tuple] | None = {} if reuse_choices else None
    queue: deque = deque()
    # the network inputs' layouts: in MindSpore's order priced once the dataset walks (filled then)
    inputs: dict = {} if mindspore else dict(ctx.input_specs)

    def decide(neighbour: Node, current: Node | Dataset) -> None:
        if follows_input(neighbour):
            dims = ctx.dims(neighbour, graph)
            src = value_layout(graph, neighbour.inputs[0], strategies, inputs)
            if src is None and dims is not None and isinstance(current, Node):
                uses = [k for k in data_inputs(current) if current.inputs[k] == neighbour.outputs[0]]
                if uses:  # reached from its consumer: the input layout that carries to what the consumer wants
                    src = input_for_output(neighbour, graph, ctx.mesh, strategies[current.id].input_spec(uses[0]))
            if dims is None or src is None:
                return  # decided once its input is (or by the defaults)
            strategy = follow_strategy(neighbour, dims, graph, ctx.mesh, src)
            edges = _edges(_local(neighbour, graph, ctx, strategies, current, grads, lookahead=False, inputs=inputs),
                           strategy, ctx.mesh)[0]
            own = op_cost(graph, neighbour, strategy, ctx.mesh, needs_grad=grads)
            strategies[neighbour.id] = strategy
            provenance[neighbour.id] = Provenance("propagated", _source_id(current), edges.comm_bytes,
                                                  "follows input layout", breakdown(edges, own))
            queue.append(neighbour)
            return
        picked = choose(neighbour, graph, ctx, strategies, current, grads, memo, tail, inputs)
        if picked is None:
            return  # no rule: left to the fallback in default_strategies
        best, edges, own = picked
        detail = "from the dataset layout" if isinstance(current, Dataset) else ""
        strategies[neighbour.id] = best
        provenance[neighbour.id] = Provenance("propagated", _source_id(current), edges.comm_bytes, detail,
                                              breakdown(edges, own))
        queue.append(neighbour)

    if mindspore:
        MindSporeWalks(graph, configured, unwalked, strategies, queue, decide).run(
            lambda: inputs.update(ctx.input_specs), lambda: dataset_readers(graph, ctx, strategies))
    else:  # graphpar's order: breadth first from every hint at once, in graph order, then from the dataset
        queue.extend(configured)
        _spread(graph, queue, strategies, decide)
        for reader in dataset_readers(graph, ctx, strategies):
            if reader.id not in strategies:
                decide(reader, DATASET)
        _spread(graph, queue, strategies, decide)
    unreached(graph, ctx, strategies, provenance)
    follow_consumers(graph, ctx, strategies, provenance)
    updates = {nid: {"strategy": strategies[nid], "provenance": prov} for nid, prov in provenance.items()}
    return graph.with_annotations(updates)


def _spread(graph: Graph, queue: deque, strategies: dict[int, NodeStrategy], decide) -> None:
    """graphpar's walk: breadth first from every op in the queue, in graph order, no op waiting for another."""
    while queue:
        current = queue.popleft()
        for neighbour in graph.neighbors(current):
            if neighbour.id not in strategies and linked(graph, current, neighbour):
                decide(neighbour, current)


def _source_id(current: Node | Dataset) -> int | None:
    return current.id if isinstance(current, Node) else None
