"""Candidate strategies per node: what the search chooses among, generated deterministically.

Every candidate comes from :func:`graphpar.planner.strategy.enumerate_strategies` (labels on runs of consecutive
mesh axes, left to right, the rest repeated: MindSpore's device-matrix semantics), on a *search mesh*: the real mesh
whose prime-factor axes are kept as they are when there are at most :data:`MAX_SEARCH_AXES` of them (any mesh up to
32 devices, 6 = 2x3, 12 = 2x2x3, 24 = 2x2x2x3 included), and grouped otherwise. A group of axes is never cut by a
candidate, which bounds the candidate count of an op with L splittable labels by C(A + L, L) for A search axes,
whatever the device count: 1,024 devices (ten axes of 2) are searched as five groups (16, 8, 2, 2, 2), so a label
may be split 2, 4, 8, 16, 64, 128, ... but not every power of two. The small groups sit on the right, where
MindSpore's device matrices put model-parallel splits (the batch label comes first and takes the left axes).

``set_algo_parameters``: ``tensor_slice_align_enable`` drops the MatMul candidates of unaligned slices before the
choice of the candidates using the most devices; ``enable_algo_approxi`` then keeps the ``ceil(1 / epsilon)`` of least
own cost (``planner.algo_filters``).

A node with a strategy already (a ``shard()`` hint, a strategy file) has exactly that candidate: hints are
constraints. A node without a sharding rule has the replicated fallback only. Under ``recursive_programming`` an op
whose SAPP strategy does not depend on its neighbours (a ``Gather``, :mod:`.sapp`) has exactly that candidate.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from graphpar._logging import notice_once
from graphpar.errors import StrategyError
from graphpar.ir.graph import Graph, Node, Provenance
from graphpar.planner.algo_filters import allowed, approximated
from graphpar.planner.cost import op_cost
from graphpar.planner.dims import DimSpec, shapes_of
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.passes.defaults import fallback_strategy
from graphpar.planner.search.sapp import sapp_fixed_strategy
from graphpar.planner.strategy import MeshInfo, NodeStrategy, enumerate_strategies, from_hint, replicated_strategy

MAX_SEARCH_AXES = 5
_SMALL_RIGHT = 3  # axes kept single on the right of a large mesh


def search_groups(mesh: MeshInfo) -> tuple[tuple[str, ...], ...]:
    """The runs of consecutive mesh axes a candidate never cuts (left to right)."""
    names = list(mesh.names)
    if len(names) <= MAX_SEARCH_AXES:
        return tuple((n,) for n in names)
    rest, right = names[:-_SMALL_RIGHT], names[-_SMALL_RIGHT:]
    half = (len(rest) + 1) // 2
    return (tuple(rest[:half]), tuple(rest[half:])) + tuple((n,) for n in right)


@dataclass(frozen=True)
class Candidates:
    """A node's choices; ``fixed`` when it came with a strategy (hint, file, no rule)."""

    strategies: tuple[NodeStrategy, ...]
    fixed: bool
    provenance: Provenance | None = None  # the provenance of a fixed choice made here (fallback)


def _on_real_mesh(cand: NodeStrategy, groups: dict[str, tuple[str, ...]], mesh: MeshInfo) -> NodeStrategy:
    def flat(axes: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(a for g in axes for a in groups[g])

    return NodeStrategy(cand.dims, tuple((l, flat(g)) for l, g in cand.label_axes), flat(cand.repeat_axes), mesh)


def _key(s: NodeStrategy, n_in: int, n_out: int) -> tuple:
    return (tuple(s.input_spec(i) for i in range(n_in)), tuple(s.output_spec(j) for j in range(n_out)),
            s.partial_axes)


def _sapp_candidate(node: Node, dims: DimSpec, ins: list, outs: list, mesh: MeshInfo) -> Candidates | None:
    """SAPP's own strategy for ``node`` as its only candidate (:mod:`.sapp`), or None: no such rule, or the mesh
    cannot hold it (said once; the op is then searched)."""
    sapp = sapp_fixed_strategy(node, ins, outs, mesh.n_devices)
    if sapp is None:
        return None
    try:
        strategy = from_hint(node, dims, sapp, ins, outs, mesh)
    except StrategyError as error:
        notice_once(f"sapp-place:{node.instance_name}:{node.scope}",
                    f"op '{node.instance_name}': SAPP's {node.kind} strategy {sapp} does not fit this mesh "
                    f"({error.reason}); graphpar searches its strategy", logging.INFO)
        return None
    return Candidates((strategy,), True, Provenance("searched", detail=f"recursive_programming: SAPP's "
                                                                       f"{node.kind} rule"))


def node_candidates(node: Node, graph: Graph, ctx: PlanContext) -> Candidates:
    if node.strategy is not None:
        return Candidates((node.strategy,), True)
    dims = ctx.dims(node, graph)
    if dims is None:
        strategy, prov = fallback_strategy(node, graph, ctx)
        return Candidates((strategy,), True, prov)
    mesh = ctx.mesh
    if not dims.splittable:
        return Candidates((replicated_strategy(dims, mesh),), False)
    ins, outs = shapes_of(node, graph)
    if ctx.search_mode == "recursive_programming":
        fixed = _sapp_candidate(node, dims, ins, outs, mesh)
        if fixed is not None:
            return fixed
    runs = search_groups(mesh)
    names = tuple(f"g{i}" for i in range(len(runs)))
    coarse = MeshInfo(names, tuple(mesh.size(r) for r in runs))
    groups = dict(zip(names, runs))
    seen, out = set(), []
    for cand in enumerate_strategies(dims, ins, outs, coarse):
        real = _on_real_mesh(cand, groups, mesh) if coarse.names != mesh.names else NodeStrategy(
            cand.dims, cand.label_axes, cand.repeat_axes, mesh)
        key = _key(real, len(ins), len(outs))
        if key not in seen:
            seen.add(key)
            out.append(real)
    algo = ctx.request.algo
    if out and algo.tensor_slice_align_enable:
        out = list(allowed(node.kind, out, ins, mesh, dataclasses.replace(algo, fully_use_devices=False)))
    if out:
        most = max(s.devices_used for s in out)
        out = [s for s in out if s.devices_used == most]  # MindSpore's fully_use_devices
    if out and algo.enable_algo_approxi:
        def own(cand: NodeStrategy) -> tuple:
            cost = op_cost(graph, node, cand, mesh, needs_grad=frozenset())
            return (round(cost.comm_bytes, 3), round(cost.flops, 3))
        out = list(approximated(out, algo, own))
    return Candidates(tuple(out) or (replicated_strategy(dims, mesh),), False)
