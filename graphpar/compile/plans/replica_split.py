"""Splitting a SEMI_AUTO/AUTO step into data-parallel replicas, so gradients are reduced once per step.

A planned graph differentiates the loss of the global batch: XLA sums each parameter's partial gradients over the
data-parallel devices inside every micro-batch (JAX's auto-sharding mode has no "unreduced" layout a loop could
carry). When the planned graph is *separable over its data-parallel axes* it can instead run once per replica
under ``jax.vmap(..., spmd_axis_name=axes)``: each replica's gradient lives in a leading replica dimension sharded
over those axes, the accumulation loop adds them locally and one reduction after the loop sums them — MindSpore's
deferred mirror reduction (``MirrorMicroStepOperator``). Inside each replica the model-parallel layouts (and their
collectives) stay as planned.

The data-parallel axes ``D`` are the leading mesh axes that split the first dimension of every batched input and
no trainable parameter. The graph is separable over ``D`` when, comparing it with the same network traced for one
replica's rows (``replica`` graph, planned alike):

* both graphs have the same nodes; a value is *batched* when its shape differs, in one dimension, by the factor
  ``|D|``;
* every node that reads or writes a batched value keeps that dimension split over ``D`` (leading) in its
  strategy: XLA computes it block by block over ``D``, so each replica's block needs only its own rows;
* the only nodes turning batched values into unbatched ones are ``ReduceMean`` / ``ReduceSum`` nodes the loss is
  computed from, and nothing computed from their outputs is batched (a reduction's result does not flow back
  into rows of the batch);
* no other output (Cell state) depends on the batch, except through the statistics of a training-mode
  ``BatchNorm``: each replica computes those over every replica's rows (``pmean`` over the replica axis of the
  per-replica mean, then of the variance around the global mean: the whole batch's two-pass statistics), whose
  derivative reaches every replica through the ``pmean``'s transpose, so the moving statistics and the gradients
  are the whole batch's;
* a constant computed from the batch size (``sum / x.shape[0]``, BatchNorm's unbiased-variance factor) has the
  same shape in both graphs: the replica runs with the whole batch's value (it then computes its block of the
  whole batch's program).

When the loss *is* one such reduction, the global loss is the mean (or sum) of the replicas' losses, and so is
its gradient. When the loss goes on computing with the reductions (``loss * scale``, ``loss + aux_loss``,
``square(mean)``: a *tail* of unbatched ops ``f(m_1, ..., p)``), each replica makes every reduction's value global
and keeps the derivative of its own rows: ``u = stop_gradient(M) + c * (m_r - stop_gradient(m_r))`` with ``M``
the replicas' mean (``c = 1``) or sum (``c = |D|``, a ``pmean``/``psum`` of a scalar-sized value inside each
micro-batch). Every replica then computes the global loss, and the mean of the replicas' gradients is
``sum_k df/dm_k * dm_k/dp + df/dp`` (the tail's partial derivatives are taken at the global values, equal in
every replica): the global gradient, still reduced once per step.

Anything else (another batch-mixing op, a reduction feeding rows back, a network whose shapes are fixed to one
batch size) keeps the global objective, reduced per micro-batch, and says why once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from graphpar._logging import notice_once
from graphpar.compile.plans.planned import Planned
from graphpar.ir.graph import Graph
from graphpar.planner import planning as pipeline


def plan_graph(plan: Any, ns: Any, avals: Sequence[jax.ShapeDtypeStruct]) -> Planned:
    """The network's train graph for ``avals``, traced and planned by ``plan`` like the step's own (no dumps:
    the step's dumps show the whole batch's graph)."""
    started = time.perf_counter()
    traced = plan.trace(ns, avals, "train")
    graph = pipeline.plan_graph(traced.graph, plan.request(traced.graph, "train"))
    return Planned(graph, plan.layout(graph), "train", traced.out_treedef, time.perf_counter() - started, traced)


LOSS_REDUCTIONS = {"ReduceMean": True, "ReduceSum": False}  # kind -> the global loss is the replicas' mean
# training-mode normalizations over the batch: a replica computes them with statistics over every replica's rows
SYNCED_STATISTICS = frozenset({"BatchNorm", "SyncBatchNorm"})


@dataclass(frozen=True)
class ReplicaSplit:
    """How a planned step runs per data-parallel replica."""

    mesh: Mesh
    axes: tuple[str, ...]  # the data-parallel mesh axes D (the vmap's spmd axes)
    replicas: int  # |D|
    mean: bool  # the loss averages the batch: replica losses (and gradients) are averaged
    graph: Graph  # the planned graph of one replica's rows
    combine: tuple[tuple[int, bool], ...] = ()  # see Separable: batch reductions made global (value id, mean)
    constants: tuple[tuple[int, Any], ...] = ()  # see Separable
    synced: tuple[int, ...] = ()  # see Separable


class NotSeparable(Exception):
    """Why a planned graph cannot be split into data-parallel replicas (the notice's text)."""


def data_parallel_axes(graph: Graph, mesh_sizes: dict[str, int]) -> tuple[tuple[str, ...], str]:
    """The leading mesh axes splitting dimension 0 of every batched input and no trainable parameter, and, when
    there are none although the batch is split, why."""
    specs = graph.plan.value_specs
    prefix: tuple[str, ...] | None = None
    used: dict[str, str] = {}
    for vid in graph.inputs:
        value = graph.values[vid]
        spec = specs.get(vid)
        if spec is None:
            continue
        if value.kind == "param":
            used.update((a, value.name) for axes in spec for a in axes)
        elif value.kind == "input" and value.shape:
            first = tuple(spec[0]) if spec else ()
            prefix = first if prefix is None else _common_prefix(prefix, first)
    prefix = tuple(a for a in prefix or () if mesh_sizes.get(a, 1) > 1)
    axes: list[str] = []
    for a in prefix:
        if a in used:
            break
        axes.append(a)
    if axes or not prefix:
        return tuple(axes), ""
    return (), (f"the batch's leading mesh axis '{prefix[0]}' also splits Parameter '{used[prefix[0]]}' (no "
                f"data-parallel axis to run replicas over)")


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for x, y in zip(a, b):
        if x != y:
            break
        out.append(x)
    return tuple(out)


def replica_avals(avals: Sequence[jax.ShapeDtypeStruct], replicas: int) -> list[jax.ShapeDtypeStruct]:
    """One replica's rows of each batched input."""
    return [jax.ShapeDtypeStruct((a.shape[0] // replicas,) + tuple(a.shape[1:]), a.dtype) if a.shape else a
            for a in avals]


def _batched_dim(g_shape: tuple[int, ...], r_shape: tuple[int, ...], replicas: int, what: str) -> int | None:
    if len(g_shape) != len(r_shape):
        raise NotSeparable(f"{what} has rank {len(g_shape)} for the whole batch but {len(r_shape)} for one replica")
    diff = [d for d, (g, r) in enumerate(zip(g_shape, r_shape)) if g != r]
    if not diff:
        return None
    if len(diff) > 1 or g_shape[diff[0]] != replicas * r_shape[diff[0]]:
        raise NotSeparable(f"{what} has shape {g_shape} for the whole batch but {r_shape} for one replica's rows "
                           f"(not one dimension divided by {replicas})")
    return diff[0]


def _same_constant(a: Any, b: Any) -> bool:
    try:
        return bool(np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b)))
    except (TypeError, ValueError):  # not an array (a PRNG key): compared by identity of type and repr
        return type(a) is type(b) and repr(a) == repr(b)


@dataclass(frozen=True)
class Separable:
    """How a planned graph splits into replicas (:func:`check_separable`): ``mean``: the replicas' losses and
    gradients are averaged (else summed); ``combine``: the replica graph's batch reductions whose outputs the loss
    goes on computing with (value id -> True for a mean, False for a sum), made global in every replica."""

    mean: bool
    combine: tuple[tuple[int, bool], ...] = ()
    constants: tuple[tuple[int, Any], ...] = ()  # replica graph constant -> the whole batch's value
    synced: tuple[int, ...] = ()  # replica graph BatchNorm nodes whose statistics cover every replica


def check_separable(whole: Graph, replica: Graph, axes: tuple[str, ...], replicas: int) -> Separable:
    """Raise :class:`NotSeparable` unless ``whole`` (planned) splits into replicas of ``replica``."""
    g_nodes, r_nodes = whole.node_list(), replica.node_list()
    if [n.label for n in g_nodes] != [n.label for n in r_nodes] or len(whole.inputs) != len(replica.inputs):
        raise NotSeparable("the network traces to different graphs for the whole batch and for one replica's rows")
    vmap: dict[int, int] = dict(zip(whole.inputs, replica.inputs))
    for gn, rn in zip(g_nodes, r_nodes):
        vmap.update(zip(gn.inputs, rn.inputs))
        vmap.update(zip(gn.outputs, rn.outputs))
    batched: dict[int, int] = {}
    constants: list[tuple[int, Any]] = []
    for gv, rv in vmap.items():
        g, r = whole.values[gv], replica.values[rv]
        if (g.kind == "const" or r.kind == "const") and not _same_constant(g.const, r.const):
            if g.kind != r.kind or np.shape(g.const) != np.shape(r.const):
                reader = whole.nodes[g.consumers[0][0]] if g.consumers else None
                where = (f"op '{reader.instance_name}' ({reader.kind}, scope {reader.scope or 'top'}) reads a "
                         f"constant of shape" if reader is not None else f"the constant '{g.name or gv}' has shape")
                raise NotSeparable(f"{where} {np.shape(g.const)} for the whole batch but {np.shape(r.const)} for one "
                                   f"replica's rows")
            constants.append((rv, g.const))  # computed from the batch size: the whole batch's is the program's
        d = _batched_dim(tuple(g.shape), tuple(r.shape), replicas, f"value '{g.name or gv}'")
        if d is not None:
            batched[gv] = d
    specs = whole.plan.value_specs
    for vid in whole.inputs:
        if vid in batched and tuple(specs.get(vid, ((),))[batched[vid]])[:len(axes)] != axes:
            raise NotSeparable(f"input '{whole.values[vid].name}' is not split over {'.'.join(axes)} in dimension "
                               f"{batched[vid]}")
    depends = {v for v in whole.inputs if v in batched}
    rn_of = {gn.id: rn.id for gn, rn in zip(g_nodes, r_nodes)}
    synced_nodes: list[int] = []
    reductions: list[Any] = []
    after = set()  # values computed from a batch reduction's output: the loss's tail, unbatched only
    for node in g_nodes:
        where = f"'{node.instance_name}' ({node.kind}, scope {node.scope or 'top'})"
        reads = [i for i, v in enumerate(node.inputs) if v in batched]
        writes = [j for j, v in enumerate(node.outputs) if v in batched]
        synced = node.kind in SYNCED_STATISTICS and node.attrs.get("is_training") is True
        if synced and (reads != [0] or writes != [0] or len(node.outputs) != 3):
            raise NotSeparable(f"op {where} normalizes other than one batched input into one batched output")
        if any(v in depends for v in node.inputs):  # a synced op's statistics are the same in every replica
            depends.update(node.outputs[:1] if synced else node.outputs)
        if synced:
            synced_nodes.append(rn_of[node.id])
        if (reads or writes) and any(v in after for v in node.inputs):
            raise NotSeparable(f"op {where} computes rows of the batch from a reduction over the batch")
        if any(v in after for v in node.inputs):
            after.update(node.outputs)
        if reads and not writes:
            if node.kind not in LOSS_REDUCTIONS:
                raise NotSeparable(f"op {where} combines the rows of the batch (only a ReduceMean/ReduceSum the "
                                   f"loss is computed from may)")
            reductions.append(node)
            after.update(node.outputs)
            continue
        if not reads and not writes:
            continue
        strategy = node.strategy
        if strategy is None:
            raise NotSeparable(f"op {where} has no strategy")
        for i in reads:
            spec = strategy.input_spec(i)
            if tuple(spec[batched[node.inputs[i]]])[:len(axes)] != axes:
                raise NotSeparable(f"op {where} does not split its input {i}'s batch dimension over "
                                   f"{'.'.join(axes)}")
        for j in writes:
            spec = strategy.output_spec(j)
            if tuple(spec[batched[node.outputs[j]]])[:len(axes)] != axes:
                raise NotSeparable(f"op {where} does not split its output {j}'s batch dimension over "
                                   f"{'.'.join(axes)}")
    if not reductions or whole.outputs[0] not in after:
        raise NotSeparable("the loss is not computed from a ReduceMean/ReduceSum over the batch")
    for vid in whole.outputs[1:]:
        if vid in depends:
            raise NotSeparable(f"the state '{whole.values[vid].name or vid}' the step updates depends on the batch")
    common = {"constants": tuple(constants), "synced": tuple(synced_nodes)}
    if len(reductions) == 1 and reductions[0].outputs[0] == whole.outputs[0]:  # the loss is the replicas' mean/sum
        return Separable(LOSS_REDUCTIONS[reductions[0].kind], **common)
    return Separable(True, tuple((vmap[n.outputs[0]], LOSS_REDUCTIONS[n.kind]) for n in reductions), **common)


def replica_split(whole: Graph, mesh: Mesh | None, avals: Sequence[jax.ShapeDtypeStruct],
                  plan_replica: Callable[[list[jax.ShapeDtypeStruct]], Graph], why: str,
                  fallback: str) -> ReplicaSplit | None:
    """The per-replica form of the planned ``whole`` graph (traced for ``avals``), or None when it has none
    (said once: ``why`` the split was wanted, the ``fallback`` that happens instead, and the reason).
    ``plan_replica(avals)`` traces and plans the network for other input avals."""
    if mesh is None or whole is None:
        return None
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape))
    axes, why_none = data_parallel_axes(whole, sizes)
    try:
        if why_none:
            raise NotSeparable(why_none)
        if not axes:
            return None  # the batch is not split: there are no data-parallel replicas
        replicas = int(np.prod([sizes[a] for a in axes]))
        if any(a.shape and a.shape[0] % replicas for a in avals):
            raise NotSeparable(f"a batch dimension does not divide by the {replicas} data-parallel replicas")
        try:
            graph = plan_replica(replica_avals(avals, replicas))
        except Exception as exc:  # the network's own shapes may fix the batch size
            raise NotSeparable(f"the network does not trace for one replica's rows "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
        separable = check_separable(whole, graph, axes, replicas)
    except NotSeparable as exc:
        notice_once(f"replica-split:{why}:{exc}", f"{why}: {fallback} because {exc}")
        return None
    return ReplicaSplit(mesh, axes, replicas, separable.mean, graph, separable.combine, separable.constants,
                        separable.synced)
