"""The channels-last pass: run a network written in NCHW with its convolutions and everything between them in NHWC,
transposing only where a value leaves that region.

What it reads: a planned graph (after planning: strategies, dumps and strategy files are written against the
graph as the user wrote it, NCHW). What it gives: per value the physical layout the lowered program holds it in
(:data:`~graphpar.compile.lowering.layout_rules.Perm`), and per node whose layouts change a body that computes the
node's logical equations on those physical arrays (:class:`Relayout`); ``compile.lowering.pins`` maps each pin's
sharding through its value's layout, and the interpreter returns the graph's outputs in the written layout.

How: one forward walk over every equation of every node, in graph order (a region analysis: the layout of a value
is decided once, by its producer). A convolution reads its input and writes its result channels-last
(``dimension_numbers`` ('NHWC', 'OIHW', 'NHWC') for MindSpore's NCHW: kernels stay OIHW, so parameters, their
gradients and checkpoints are untouched); an op with a rule (``compile.lowering.layout_rules``) computes in the
layout of its permuted operands, so BatchNorm, ReLU, the residual adds, pooling and the global mean over H, W stay in
the region; an op without a rule reads the written layout, which costs one transpose of a permuted operand: the
region's edge (a Flatten before the classifier, a graph output). A reduction over H and W leaves (N, C) in the
written order, so ResNet's classifier head needs no transpose at all; the first convolution transposes the image.

When: ``format_transform`` in ``set_context`` (:func:`enabled`): ``"auto"`` (the default) runs it on GPUs, where
cuDNN's convolutions are channels-last and XLA otherwise transposes around each one, as MindSpore's GPU backend
transforms NCHW to NHWC by default (``disable_format_transform=True`` turns it off there); ``"channels_last"`` on
every platform (tests run it on CPU); ``"off"`` never. A graph without a convolution is lowered as it is.

Not handled: pipeline stages (each stage program is lowered as written); a value crossing between nodes is held in
one layout, so a deferred broadcast that is a node of its own (a raw ``jnp`` broadcast in ``construct``) is
materialized as written and transposed by its reader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jax import lax
from jax.extend import core as jcore

from graphpar.compile.lowering.bodies import CALL_PRIMS
from graphpar.compile.lowering.layout_rules import ANY, FLEX, Perm, Relaid, inverse, norm, rule
from graphpar.ir.graph import Graph, Node

AUTO_PLATFORMS = frozenset({"gpu", "cuda", "rocm"})  # where "auto" runs the pass


def enabled(setting: str, platform: str) -> bool:
    """Whether the pass runs for ``setting`` on devices of ``platform`` (``jax.Device.platform``)."""
    return setting == "channels_last" or (setting == "auto" and platform.lower() in AUTO_PLATFORMS)


# --- the analysis ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BodyLayout:
    """A jaxpr's equations relaid: one :class:`Relaid` per equation (a nested ``jit``'s own :class:`BodyLayout` in
    ``inner``), the layout of each result, the convolutions run channels-last and the transposes it makes (operands
    read in another layout than they are held in, unit dimensions aside)."""

    eqns: tuple[Relaid, ...]
    inner: tuple[BodyLayout | None, ...]
    out: tuple[Perm, ...]
    seeds: int
    edges: int
    changed: bool


def _is_literal(atom: Any) -> bool:
    return isinstance(atom, jcore.Literal)


def moves_data(have: Perm, want: Perm, shape: Sequence[int]) -> bool:
    """Whether reading a value held in ``have`` in layout ``want`` moves data (not only unit dimensions)."""
    if have == want:
        return False
    rank = len(shape)
    order = [d for d in (have or range(rank)) if shape[d] != 1]
    return order != [d for d in (want or range(rank)) if shape[d] != 1]


def _inner_jaxpr(eqn: Any) -> tuple[Any, Sequence[Any]]:
    inner = eqn.params.get("jaxpr") or eqn.params["call_jaxpr"]
    return (inner.jaxpr, inner.consts) if isinstance(inner, jcore.ClosedJaxpr) else (inner, ())


def analyse(invars: Sequence[Any], eqns: Sequence[Any], outvars: Sequence[Any], states: Sequence[Perm]) -> BodyLayout:
    """The layouts of a jaxpr's values when its inputs are held in ``states`` (one forward walk)."""
    held: dict[Any, Any] = {v: s for v, s in zip(invars, states) if not _is_literal(v)}
    relaid: list[Relaid] = []
    inner: list[BodyLayout | None] = []
    seeds = edges = 0
    changed = any(s is not None for s in states)
    for eqn in eqns:
        ins = [None if _is_literal(a) else held[a] for a in eqn.invars]
        nested = None
        if eqn.primitive.name in CALL_PRIMS:
            jaxpr, consts = _inner_jaxpr(eqn)
            wanted = [s if s != FLEX else None for s in ins]
            nested = analyse([*jaxpr.constvars, *jaxpr.invars], jaxpr.eqns, jaxpr.outvars,
                             [None] * len(consts) + wanted)
            r = Relaid(tuple(wanted), nested.out, kind="call")
            seeds, edges = seeds + nested.seeds, edges + nested.edges
        else:
            r = rule(eqn, ins)
            seeds += r.seeds
        for a, s, w in zip(eqn.invars, ins, r.want):
            if s != FLEX and w != ANY and moves_data(s, w, a.aval.shape):
                edges += 1
        changed = changed or r.kind == "alias" or any(w not in (None, ANY) for w in r.want) or any(
            o not in (None, FLEX) for o in r.out)
        relaid.append(r)
        inner.append(nested)
        held.update(zip(eqn.outvars, r.out))
    out = []
    for v in outvars:
        s = None if _is_literal(v) else held[v]
        out.append(None if s == FLEX else s)
    return BodyLayout(tuple(relaid), tuple(inner), tuple(out), seeds, edges, changed)


# --- evaluation ------------------------------------------------------------------------------------------------------
class _Env:
    """Values of one jaxpr evaluation, each held in its layout; a deferred equation's result is made on first read
    in the layout that read wants (and kept per layout)."""

    def __init__(self) -> None:
        self.held: dict[Any, tuple[Any, Perm]] = {}
        self.deferred: dict[Any, Any] = {}  # var -> its equation
        self.made: dict[tuple[Any, Perm], Any] = {}

    def read(self, atom: Any, want: Any) -> Any:
        if _is_literal(atom):
            return atom.val
        if atom in self.deferred:
            return self._make(atom, None if want == ANY else want)
        x, have = self.held[atom]
        if want == ANY or have == want:
            return x
        key = (atom, want)
        found = self.made.get(key)
        if found is None:
            found = self.made[key] = convert(x, have, want)
        return found

    def _make(self, var: Any, want: Perm) -> Any:
        key = (var, want)
        found = self.made.get(key)
        if found is None:
            found = self.made[key] = _deferred(self, self.deferred[var], want)
        return found


def convert(x: Any, have: Perm, want: Perm) -> Any:
    """``x`` (held in ``have``) held in ``want``: a reshape when only unit dimensions move, else a transpose."""
    rank = x.ndim
    inv = inverse(have, rank)
    axes = tuple(inv[d] for d in (want or range(rank)))
    if not moves_data(have, want, [x.shape[inv[d]] for d in range(rank)]):
        return lax.reshape(x, tuple(x.shape[a] for a in axes))
    return lax.transpose(x, axes)


def _deferred(env: _Env, eqn: Any, want: Perm) -> Any:
    """A deferred ``broadcast_in_dim`` / unit ``reshape`` / ``squeeze`` computed straight into ``want``."""
    out_shape = tuple(eqn.outvars[0].aval.shape)
    rank = len(out_shape)
    phys_shape = tuple(out_shape[d] for d in (want or range(rank)))
    operand = eqn.invars[0]
    if eqn.primitive.name == "broadcast_in_dim":
        inv = inverse(want, rank)
        positions = [inv[d] for d in eqn.params["broadcast_dimensions"]]
        order = norm(np.argsort(positions, kind="stable").tolist())
        x = env.read(operand, order)
        with eqn.ctx.manager:
            return lax.broadcast_in_dim(x, phys_shape, tuple(sorted(positions)))
    # a reshape moving unit dimensions only: read the operand with its non-unit dimensions in the order they have
    # in the result, then reshape
    in_shape = tuple(operand.aval.shape)
    in_big = [d for d, n in enumerate(in_shape) if n != 1]
    out_big = [d for d, n in enumerate(out_shape) if n != 1]
    of_out = dict(zip(out_big, in_big))
    order = [of_out[d] for d in (want or range(rank)) if out_shape[d] != 1]
    units = [d for d, n in enumerate(in_shape) if n == 1]
    x = env.read(operand, norm(units + order))
    with eqn.ctx.manager:
        return lax.reshape(x, phys_shape)


def evaluate(layout: BodyLayout, invars: Sequence[Any], eqns: Sequence[Any], outvars: Sequence[Any],
             args: Sequence[Any], states: Sequence[Perm]) -> list[Any]:
    """The jaxpr's outputs, each in its layout (``layout.out``), for ``args`` held in ``states``."""
    env = _Env()
    for v, x, s in zip(invars, args, states):
        if not _is_literal(v):
            env.held[v] = (x, s)
    for eqn, r, nested in zip(eqns, layout.eqns, layout.inner):
        if r.kind == "defer":
            env.deferred[eqn.outvars[0]] = eqn
            continue
        xs = [env.read(a, w) for a, w in zip(eqn.invars, r.want)]
        if r.kind == "alias":
            outs = xs
        elif r.kind == "call":
            jaxpr, consts = _inner_jaxpr(eqn)
            outs = evaluate(nested, [*jaxpr.constvars, *jaxpr.invars], jaxpr.eqns, jaxpr.outvars,
                            [*consts, *xs], [None] * len(consts) + list(r.want))
        else:
            prim = eqn.primitive
            params = {**eqn.params, **r.params}
            with eqn.ctx.manager:
                out = prim.bind(*xs, **prim.get_bind_params(params))
            outs = out if prim.multiple_results else [out]
        for v, o, s in zip(eqn.outvars, outs, r.out):
            env.held[v] = (o, s)
    return [env.read(v, s) for v, s in zip(outvars, layout.out)]


# --- the graph -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Relayout:
    """A node computed on permuted arrays: its body (physical inputs to physical outputs) and its signature (the
    layouts of its inputs and outputs: part of its shared-call key)."""

    body: Callable[[Sequence[Any]], list[Any]]
    signature: tuple[tuple[Perm, ...], tuple[Perm, ...]]


@dataclass(frozen=True)
class GraphLayout:
    """The pass's result for one graph: the layout of every value held permuted (graph value id -> layout), the
    nodes that compute on permuted arrays, and what it cost: convolutions run channels-last, transposes at the
    region's edges (inside nodes; the graph's permuted outputs add one each)."""

    perms: Mapping[int, Perm]
    nodes: Mapping[int, Relayout]
    convolutions: int
    edges: int

    def perm(self, value: int) -> Perm:
        return self.perms.get(value)

    def output_perms(self, outputs: Sequence[int]) -> tuple[Perm, ...]:
        return tuple(self.perms.get(v) for v in outputs)


def _node_jaxpr(node: Node) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any], Sequence[Any]]:
    """(invars, eqns, outvars, consts) of what the node evaluates (``bodies.node_body``'s three cases)."""
    if node.body is not None:
        b = node.body
        return b.invars, b.eqns, b.outvars, ()
    eqn = node.eqn
    if node.is_op or eqn.primitive.name in CALL_PRIMS:
        jaxpr, consts = _inner_jaxpr(eqn)
        return [*jaxpr.constvars, *jaxpr.invars], jaxpr.eqns, jaxpr.outvars, consts
    return eqn.invars, [eqn], eqn.outvars, ()


def _relaid_body(node: Node, layout: BodyLayout, states: tuple[Perm, ...]) -> Callable[[Sequence[Any]], list[Any]]:
    invars, eqns, outvars, consts = _node_jaxpr(node)
    full = [None] * len(consts) + list(states)

    def body(xs: Sequence[Any]) -> list[Any]:
        return evaluate(layout, invars, eqns, outvars, [*consts, *xs], full)

    return body


def plan_graph(graph: Graph) -> GraphLayout:
    """The channels-last layouts of ``graph`` (see the module docstring): nothing when it has no convolution."""
    perms: dict[int, Perm] = {}
    nodes: dict[int, Relayout] = {}
    convolutions = edges = 0
    for node in graph.node_list():
        states = tuple(perms.get(v) for v in node.inputs)
        invars, eqns, outvars, consts = _node_jaxpr(node)
        layout = analyse(invars, eqns, outvars, [None] * len(consts) + list(states))
        if not layout.changed:
            continue
        convolutions += layout.seeds
        edges += layout.edges
        nodes[node.id] = Relayout(_relaid_body(node, layout, states), (states, layout.out))
        for v, p in zip(node.outputs, layout.out):
            if p is not None:
                perms[v] = p
    edges += sum(1 for v in graph.outputs if v in perms)
    if not convolutions:
        return GraphLayout({}, {}, 0, 0)
    return GraphLayout(perms, nodes, convolutions, edges)


def to_written(x: Any, perm: Perm) -> Any:
    """A graph output held in ``perm``, in the layout the user wrote."""
    return x if perm is None else convert(x, perm, None)
