"""The search problem: decision variables, their candidates' costs, and the edges between them.

One *variable* per node, or per position of a repeated layer (:mod:`.layers`: the aligned nodes of every copy share
one variable). A variable picks one candidate (:mod:`.candidates`). The objective is the cost model's per-step time
(``Cost.time()``, alpha * messages + beta * wire bytes + gamma * FLOPs, per device, forward + backward):

* unary terms: each candidate's :func:`op_cost` (its own partial-sum and gradient collectives, compute), summed over
  the copies, plus the redistribution of inputs whose layout is fixed (dataset inputs, state stored replicated) and
  of edges between two copies' nodes of the same variable;
* edge terms: the :func:`redistribution_cost` (forward and backward) of every value from its producer's output
  layout to each consumer's input layout. An edge is priced over *layout classes*: candidates with the same layout
  of that value share a row, so an edge has (distinct producer layouts) x (distinct consumer layouts) terms, not
  (candidates) x (candidates). Edges between the same variables at the same ports (one per copy) are counted once
  with their multiplicity;
* a Parameter read by several ops gets a variable of its own (its storage layout, among the layouts its readers
  want), with an edge to each reader; a Parameter read by one op is stored as that op reads it (free).

Memory (``parallel.memory_model``): the predicted peak is ``fixed + max(backward, update)``: per candidate its
``memory_bytes`` (its parameters with optimizer state, its outputs kept for the backward pass, its reduced
gradients) summed over the copies, plus on every edge whose consumer keeps a redistributed copy what that copy adds,
plus the plan's largest transient buffer (backward); or per candidate its arguments and twice its reduced gradients
(update); ``fixed`` is the dataset batch. Both are bounded by ``max_device_memory``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphpar.ir.graph import Graph, Node
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.search.candidates import Candidates, node_candidates
from graphpar.planner.memory_model import keeps_input, sole_keeper, value_kept
from graphpar.planner.search.costs import (
    ZERO, Cost, Hardware, block_bytes, copy_memory, grad_values, input_bytes, op_cost, redistribution_cost)
from graphpar.planner.search.layers import repeated_layers
from graphpar.planner.strategy import NodeStrategy, Spec


def scaled(cost: Cost, k: int) -> Cost:
    """``k`` copies of ``cost``."""
    return cost.scaled(k)


@dataclass
class Variable:
    """One decision. ``nodes``: the node ids that follow it (one, or one per copy of a layer); for a Parameter's
    storage variable, ``param`` is its value id and ``layouts`` its choices."""

    nodes: list[int]
    choices: Candidates | None
    layouts: tuple[Spec, ...] = ()
    param: int | None = None
    unary: list[Cost] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.layouts) if self.param is not None else len(self.choices.strategies)

    def strategy(self, i: int) -> NodeStrategy:
        return self.choices.strategies[i]


@dataclass
class Edge:
    """Redistribution between variable ``u`` (its choice's layout ``src[i]``) and ``v`` (``dst[j]``), priced over
    layout classes: ``cost[a, b]`` seconds for class ``a`` of ``u`` and ``b`` of ``v``."""

    u: int
    v: int
    u_class: np.ndarray  # per choice of u: its layout class
    v_class: np.ndarray
    cost: np.ndarray  # (classes of u) x (classes of v), seconds, multiplicity included
    count: int
    memory: np.ndarray  # (classes of u) x (classes of v), bytes the kept redistributed copy adds, multiplicity in


@dataclass
class Problem:
    graph: Graph
    variables: list[Variable]
    edges: list[Edge]
    var_of: dict[int, int]  # node id -> variable index
    hw: Hardware
    constant: float = 0.0  # cost no choice changes
    copies: int = 0  # repeated-layer groups found
    fixed_memory: float = 0.0  # bytes no choice changes (the dataset batch in its layouts)

    def unary_time(self, g: int) -> np.ndarray:
        return np.array([c.time(self.hw) for c in self.variables[g].unary])

    # the peak is fixed + max(backward, update) (parallel.memory_model.peak_bytes): two linear rows and a max
    def memory(self, g: int) -> np.ndarray:
        """Per choice, its bytes during the backward pass: arguments + kept activations + reduced gradients."""
        return np.array([c.memory_bytes for c in self.variables[g].unary])

    def update_memory(self, g: int) -> np.ndarray:
        """Per choice, its bytes at the update: arguments + 2 x the gradients a collective reduces."""
        return np.array([c.memory_bytes - c.activation_bytes + c.gradient_bytes for c in self.variables[g].unary])

    def transient(self, g: int) -> np.ndarray:
        """Per choice, the largest buffer its backward holds briefly (the plan's largest adds to the backward)."""
        return np.array([c.transient_bytes for c in self.variables[g].unary])

    def objective(self, choice: list[int]) -> float:
        """Total time of an assignment (one choice index per variable)."""
        total = self.constant + sum(self.variables[g].unary[i].time(self.hw) for g, i in enumerate(choice))
        for e in self.edges:
            total += e.cost[e.u_class[choice[e.u]], e.v_class[choice[e.v]]]
        return float(total)

    def memory_of(self, choice: list[int]) -> float:
        """The predicted per-device peak of an assignment."""
        backward = sum(float(self.memory(g)[i]) for g, i in enumerate(choice))
        for e in self.edges:
            backward += e.memory[e.u_class[choice[e.u]], e.v_class[choice[e.v]]]
        backward += max((float(self.transient(g)[i]) for g, i in enumerate(choice)), default=0.0)
        update = sum(float(self.update_memory(g)[i]) for g, i in enumerate(choice))
        return self.fixed_memory + max(backward, update)


class Pricer:
    """Caches the cost model's answers: a deep graph asks the same questions once per layer."""

    def __init__(self, graph: Graph, ctx: PlanContext, training: bool = True):
        self.graph, self.ctx, self.training = graph, ctx, training
        self.grads = grad_values(graph) if training else frozenset()
        self._redist: dict[tuple, Cost] = {}
        self._op: dict[tuple, Cost] = {}
        self._kept: dict[tuple, bool] = {}
        self._specs: dict[int, tuple[NodeStrategy, tuple[Spec, ...], tuple[Spec, ...]]] = {}

    def specs(self, strategy: NodeStrategy) -> tuple[tuple[Spec, ...], tuple[Spec, ...]]:
        """(input layouts, output layouts) of a strategy, computed once per strategy object."""
        entry = self._specs.get(id(strategy))
        if entry is None:
            ins = tuple(strategy.input_spec(i) for i in range(len(strategy.dims.inputs)))
            outs = tuple(strategy.output_spec(j) for j in range(len(strategy.dims.outputs)))
            entry = self._specs[id(strategy)] = (strategy, ins, outs)  # the object kept: its id stays unique
        return entry[1], entry[2]

    def ins(self, strategy: NodeStrategy) -> tuple[Spec, ...]:
        return self.specs(strategy)[0]

    def outs(self, strategy: NodeStrategy) -> tuple[Spec, ...]:
        return self.specs(strategy)[1]

    def redistribution(self, vid: int, src: Spec, dst: Spec, kept: bool = False) -> Cost:
        """The edge ``src -> dst`` of value ``vid``; ``kept``: its consumer's backward keeps the copy
        (``memory_model.keeps_input``), whose bytes then count."""
        value = self.graph.values[vid]
        if src == dst or not value.shape:
            return ZERO
        key = (value.shape, value.dtype, vid in self.grads, src, dst)
        cost = self._redist.get(key)
        if cost is None:
            cost = redistribution_cost(value, src, dst, self.ctx.mesh, self.training, vid in self.grads)
            self._redist[key] = cost
        if kept and self.training:
            cost = cost + copy_memory(self.graph, vid, src, dst, self.ctx.mesh, self.grads)
        return cost

    def kept(self, node: Node, k: int) -> bool:
        """Whether ``node``'s backward keeps its ``k``-th input (cached per node and port)."""
        key = (node.id, k)
        hit = self._kept.get(key)
        if hit is None:
            hit = self._kept[key] = self.training and keeps_input(node, k, self.graph, self.grads)
        return hit

    def op(self, var: int, node: Node, i: int, strategy: NodeStrategy) -> Cost:
        key = (var, i)
        cost = self._op.get(key)
        if cost is None:
            cost = op_cost(self.graph, node, strategy, self.ctx.mesh, self.training, self.grads)
            combined = combined_gradient_messages(self.graph, node, strategy, self.grads)
            if combined:
                cost = dataclasses.replace(cost, messages=cost.messages - combined)
            self._op[key] = cost
        return cost


def combined_gradient_messages(graph: Graph, node: Node, strategy: NodeStrategy, grads: frozenset[int]) -> int:
    """How many of ``op_cost``'s messages are gradient AllReduces of Parameters. XLA's all-reduce combiner merges
    every Parameter's gradient reduction over the same devices into one collective per step, so the search does
    not charge them a message each (their bytes stay): otherwise a plan that reduces thirty small gradients looks
    thirty latencies slower than one that reduces one, which the compiled program does not show."""
    axes = strategy.axes
    split = [l for l in strategy.dims.order if axes.get(l)]
    count = 0
    for i, vid in enumerate(node.inputs):
        if vid not in grads or graph.values[vid].kind != "param":
            continue
        carried = set(strategy.dims.inputs[i])
        over = [a for l in split if l not in carried for a in axes[l]]
        if strategy.mesh.size(over) > 1:
            count += 1
    return count


def _classes(specs: list[Spec]) -> tuple[np.ndarray, list[Spec]]:
    index: dict[Spec, int] = {}
    cls = np.array([index.setdefault(s, len(index)) for s in specs], dtype=np.int64)
    return cls, list(index)


def build_problem(graph: Graph, ctx: PlanContext, hw: Hardware, pricer: Pricer | None = None) -> Problem:
    pricer = pricer or Pricer(graph, ctx)
    nodes = graph.node_list()
    var_of: dict[int, int] = {}
    variables: list[Variable] = []
    groups = repeated_layers(graph)
    for copies in groups:
        for position in zip(*copies):
            rep = graph.nodes[position[0]]
            var_of.update({nid: len(variables) for nid in position})
            variables.append(Variable(list(position), node_candidates(rep, graph, ctx)))
    for node in nodes:
        if node.id not in var_of:
            var_of[node.id] = len(variables)
            variables.append(Variable([node.id], node_candidates(node, graph, ctx)))
    # unary: op costs (one per copy), fixed-layout inputs, edges inside one variable
    for g, var in enumerate(variables):
        rep = graph.nodes[var.nodes[0]]
        costs = [scaled(pricer.op(g, rep, i, s), len(var.nodes)) for i, s in enumerate(var.choices.strategies)]
        var.unary = _kept_correction(graph, pricer, var, costs)
    edge_count: dict[tuple, list[int]] = {}  # (u, out port, v, in port, value kind) -> [count, a value id]
    params: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for node in nodes:
        g = var_of[node.id]
        var = variables[g]
        for k, vid in enumerate(node.inputs):
            value = graph.values[vid]
            if not value.is_array or not value.shape:
                continue
            if value.producer is not None:
                u = var_of[value.producer]
                j = graph.nodes[value.producer].outputs.index(vid)
                kept = pricer.kept(node, k)
                if u == g:
                    var.unary = [c + pricer.redistribution(vid, pricer.outs(s)[j], pricer.ins(s)[k], kept)
                                 for c, s in zip(var.unary, var.choices.strategies)]
                else:
                    key = (u, j, g, k, _value_key(graph, vid, pricer), kept, copy_key(graph, vid, pricer))
                    entry = edge_count.setdefault(key, [0, vid])
                    entry[0] += 1
            elif value.kind == "param":
                params[vid].append((node.id, k))
            else:
                src = ctx.input_specs.get(vid, tuple(() for _ in value.shape)) if value.kind == "input" else tuple(
                    () for _ in value.shape)
                kept = pricer.kept(node, k)
                var.unary = [c + pricer.redistribution(vid, src, pricer.ins(s)[k], kept)
                             for c, s in zip(var.unary, var.choices.strategies)]
    edges: list[Edge] = []
    for (u, j, g, k, _, kept, _), (count, vid) in edge_count.items():
        src = [pricer.outs(s)[j] for s in variables[u].choices.strategies]
        dst = [pricer.ins(s)[k] for s in variables[g].choices.strategies]
        _add_edge(edges, variables, pricer, hw, vid, u, src, g, dst, count, kept)
    # Parameters read by several ops: a storage variable each (tied across copies by its readers' variables)
    param_vars: dict[tuple, int] = {}
    for vid, readers in params.items():
        if len(readers) < 2:
            continue
        value = graph.values[vid]
        key = (tuple(sorted((var_of[n], k) for n, k in readers)), value.shape, value.dtype)
        p = param_vars.get(key)
        if p is None:
            layouts = list(dict.fromkeys(pricer.ins(s)[k] for n, k in readers
                                         for s in variables[var_of[n]].choices.strategies))
            p = len(variables)
            param_vars[key] = p
            variables.append(Variable([], None, tuple(layouts), vid, [ZERO] * len(layouts)))
            for n, k in readers:
                dst = [pricer.ins(s)[k] for s in variables[var_of[n]].choices.strategies]
                _add_edge(edges, variables, pricer, hw, vid, p, layouts, var_of[n], dst,
                          len(variables[var_of[n]].nodes))
    fixed = input_bytes(graph, ctx.mesh, ctx.input_specs) if pricer.training else 0.0
    return Problem(graph, variables, _merge(edges), var_of, hw, 0.0, len(groups), fixed)


def _kept_correction(graph: Graph, pricer: Pricer, var: Variable, costs: list[Cost]) -> list[Cost]:
    """The copies of a layer share the representative's price, but whether an output is kept for the backward
    pass depends on its consumers, which differ at the layer's ends (the last copy's output feeds the loss): add
    (or take away) each copy's difference, so the search's memory is the plan's."""
    if len(var.nodes) < 2 or not pricer.training:
        return costs
    rep = graph.nodes[var.nodes[0]]
    base = [value_kept(graph, v, pricer.grads) for v in rep.outputs]
    delta = [0] * len(base)  # per output: copies kept minus the representative's count
    for nid in var.nodes[1:]:
        for j, v in enumerate(graph.nodes[nid].outputs):
            delta[j] += int(value_kept(graph, v, pricer.grads)) - int(base[j])
    if not any(delta):
        return costs
    out = []
    for c, s in zip(costs, var.choices.strategies):
        extra = sum(d * block_bytes(graph.values[v], pricer.outs(s)[j], pricer.ctx.mesh)
                    for j, (d, v) in enumerate(zip(delta, rep.outputs)) if d and graph.values[v].shape)
        out.append(c + Cost(memory_bytes=extra, activation_bytes=extra))
    return out


def copy_key(graph: Graph, vid: int, pricer: Pricer) -> tuple:
    """What a kept copy's bytes depend on besides the layouts (``cost.copy_memory``): an argument or an op output,
    and whether its consumer is its only keeper."""
    value = graph.values[vid]
    return (value.producer is None, value.producer is not None and sole_keeper(graph, vid, pricer.grads))


def _value_key(graph: Graph, vid: int, pricer: Pricer) -> tuple:
    value = graph.values[vid]
    return (value.shape, value.dtype, vid in pricer.grads)


def _add_edge(edges: list[Edge], variables: list[Variable], pricer: Pricer, hw: Hardware, vid: int, u: int,
              src: list[Spec], v: int, dst: list[Spec], count: int, kept: bool = False) -> None:
    """Add the edge, or fold it into a unary term when one side has a single layout."""
    u_class, u_layouts = _classes(src)
    v_class, v_layouts = _classes(dst)
    priced = [[scaled(pricer.redistribution(vid, a, b, kept), count) for b in v_layouts] for a in u_layouts]
    cost = np.array([[c.time(hw) for c in row] for row in priced])
    memory = np.array([[c.memory_bytes for c in row] for row in priced])
    if not cost.any() and not memory.any():
        return
    if len(u_layouts) == 1 and len(v_layouts) == 1:
        variables[v].unary = [c + priced[0][0] for c in variables[v].unary]  # memory too; the same for all
        return
    if len(u_layouts) == 1:
        variables[v].unary = [c + priced[0][b] for c, b in zip(variables[v].unary, v_class)]
        return
    if len(v_layouts) == 1:
        variables[u].unary = [c + priced[a][0] for c, a in zip(variables[u].unary, u_class)]
        return
    edges.append(Edge(u, v, u_class, v_class, cost, count, memory))


def _merge(edges: list[Edge]) -> list[Edge]:
    """Edges between the same two variables with the same layout classes become one."""
    merged: dict[tuple, Edge] = {}
    for e in edges:
        key = (e.u, e.v, e.u_class.tobytes(), e.v_class.tobytes())
        if key in merged:
            m = merged[key]
            m.cost = m.cost + e.cost
            m.memory = m.memory + e.memory
            m.count += e.count
        else:
            merged[key] = Edge(e.u, e.v, e.u_class, e.v_class, e.cost.copy(), e.count, e.memory.copy())
    return list(merged.values())


def describe(problem: Problem) -> dict[str, Any]:
    return {"variables": len(problem.variables), "edges": len(problem.edges),
            "choices": int(sum(v.size for v in problem.variables)),
            "edge_terms": int(sum(e.cost.size for e in problem.edges)), "repeated_groups": problem.copies}
