"""The stage search: pipeline stage count, layer-to-stage assignment, micro-batches, schedule, tensor x data
parallel inside a stage, recompute per stage and optimizer sharding, under the per-device memory budget, minimising
the predicted step time of :mod:`.model`.

For one parallel :class:`~.model.Shape` the repeated layers are identical, so a contiguous assignment is a count of
layers per stage, and stage i's time per micro-batch is ``fixed_i + l_i x t(recompute_i)``. The slowest stage sets
the step, so the assignment minimises the bottleneck exactly: every bottleneck worth trying is one of the values
``fixed_i + l x t(r)`` (all i, l, r); for a bottleneck T stage i can take ``max over r of min(layers fitting in T,
layers fitting in memory)``; the smallest T whose capacities sum to the layer count is the optimum (Alpa's stage DP
reduces to this for identical layers), and the layers are then handed out from the first stage on, each stage
taking what it can up to what is left, with recompute only where memory needs it. Shapes are enumerated in a fixed
order and ties keep the first, so the result is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from graphpar.planner.stages.model import (SCHEDULES, Cluster, EdgeCost, LayerCost, Shape, backward_pieces,
                                           expert_time, fixed_memory, fixed_time, layer_memory, layer_time,
                                           layer_weights, reduce_time, stage_memory, sync_time)
from graphpar.planner.stages.schedules import schedule_options
from graphpar.planner.stages.sequence import variants


@dataclass(frozen=True)
class StagePlan:
    """A priced pipeline plan: the shape, per stage its layer count, recompute, time per micro-batch and memory,
    and the step's prediction."""

    shape: Shape
    layers: tuple[int, ...]
    recompute: tuple[bool, ...]
    stage_time: tuple[float, ...]  # s per micro-batch
    stage_memory: tuple[float, ...]  # bytes per device
    sync_time: float  # s: the slowest stage's once-per-step data-parallel exchange (optimizer sharding's gather)
    step_time: float  # s
    layer_plan: str = ""
    # s per micro-batch, part of stage_time: each stage's data-parallel gradient reduction (model.reduce_time)
    reduce_time: tuple[float, ...] = ()
    # bytes per device each stage reduces over dp per micro-batch, model.reductions_per_step(shape) times a step
    # (the routed experts' gradients, reduced over dp / ep, not included)
    reduced_bytes: tuple[float, ...] = ()

    @property
    def bubble(self) -> float:
        return self.shape.bubble

    def describe(self) -> str:
        s = self.shape
        rc = sum(self.recompute)
        ep = f" (ep {s.ep})" if s.ep > 1 else ""
        sp = " (sequence parallel)" if s.seq_parallel else ""
        sp += f" (weight-bounded layer plan {s.weight_bound})" if s.weight_bound else ""
        return (f"pp {s.stages} x tp {s.tp}{sp} x dp {s.dp}{ep}, {s.micro_batches} micro-batches of {s.micro}, {schedule_text(s)}"
                f"{', optimizer sharded' if s.optimizer_shard else ''}, recompute on {rc}/{s.stages} stages: "
                f"{self.step_time:.4g} s/step, bubble {self.bubble:.1%}, peak {max(self.stage_memory) / 2 ** 30:.3g} GiB")


@dataclass(frozen=True)
class StageSearch:
    """The best plan, the runners-up (best first, at most one per stage count / tensor size / schedule) and how
    many shapes were priced."""

    best: StagePlan | None
    alternatives: tuple[StagePlan, ...]
    priced: int
    fitted: int


def schedule_text(shape: Shape) -> str:
    """``1f1b``, ``gpipe`` or ``interleaved 1f1b (v chunks)``."""
    return shape.schedule if shape.chunks == 1 else f"interleaved {shape.schedule} ({shape.chunks} chunks)"


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def assign(shape: Shape, n_layers: int, layer: LayerCost, head: EdgeCost, tail: EdgeCost, cluster: Cluster,
           slots: float, fixed_recompute: bool | None = None, even: bool = False) -> StagePlan | None:
    """The best layer-to-stage assignment of ``n_layers`` identical layers for ``shape`` (None when none fits the
    budget). ``fixed_recompute``: the same recompute on every stage (a hand-set configuration); ``even``: the
    layers split evenly (Megatron's), nothing searched. With ``shape.chunks`` > 1 (interleaved 1F1B) every stage
    takes at least one layer per chunk."""
    p, hw = shape.stages, cluster.hw
    if p * shape.chunks > n_layers:
        return None
    budget = math.inf if cluster.memory is None else cluster.memory
    options = (False, True) if fixed_recompute is None else (fixed_recompute,)
    dense, experts = layer_weights(layer, shape)
    edges = [((head.weight_bytes if i == 0 else 0.0) + (tail.weight_bytes if i == p - 1 else 0.0)) / shape.tp
             for i in range(p)]
    # each micro-batch's gradients are reduced over dp in the stage's backward: per layer, and the edges' once
    per_layer_reduce = reduce_time(dense, experts, shape, cluster)[1]
    fixed_reduce = [sum(reduce_time(e, 0.0, shape, cluster)) + (cluster.hw.alpha if experts and shape.dp // shape.ep > 1
                                                                else 0.0) for e in edges]
    if shape.chunks > 1:  # each chunk's backward reduces its own gradients: the latencies once per chunk
        fixed_reduce = [f + (shape.chunks - 1) * reduce_time(dense, experts, shape, cluster)[0] for f in fixed_reduce]
    times = {r: layer_time(layer, hw, r) + expert_time(layer, shape, cluster, r) + per_layer_reduce for r in options}
    fixed_t = np.array([fixed_time(shape, i, layer, head, tail, cluster) + fixed_reduce[i] for i in range(p)])
    caps_mem = {}
    for r in options:
        cap = np.full(p, float(n_layers))
        for i in range(p):  # resident + each backward piece: linear in the layer count, each a bound
            resident = (fixed_memory(shape, i, layer, head, tail, slots, r), layer_memory(layer, shape, i, r, slots))
            for f, per in backward_pieces(shape, i, layer, head, tail, r):
                free, per = budget - resident[0] - f, resident[1] + per
                cap[i] = min(cap[i], np.floor(free / per) if per > 0 else (n_layers if free >= 0 else -1))
        caps_mem[r] = cap.clip(-1, n_layers)
    if even:  # the extra layers of an uneven split on the last stages (they hold the fewest micro-batches)
        counts = [n_layers // p + (i >= p - n_layers % p) for i in range(p)]
    else:
        counts = _bottleneck_counts(p, n_layers, times, fixed_t, caps_mem, shape.chunks)
        if counts is None:
            return None
    if min(counts) < shape.chunks:
        return None
    recompute = []
    for i, l in enumerate(counts):
        fits = [r for r in options if caps_mem[r][i] >= l]
        if not fits:
            return None
        recompute.append(min(fits, key=lambda r: times[r]))
    stage_time = tuple(float(fixed_t[i] + counts[i] * times[r]) for i, r in enumerate(recompute))
    reduce = tuple(sum(reduce_time(counts[i] * dense + edges[i], counts[i] * experts, shape, cluster))
                   for i in range(p))
    memory = tuple(stage_memory(shape, i, counts[i], layer, head, tail, slots, r) for i, r in enumerate(recompute))
    sync = max(sync_time(counts[i] * dense + edges[i], shape, cluster)
               + (sync_time(counts[i] * experts, shape, cluster, shape.dp // shape.ep) if experts else 0.0)
               for i in range(p))
    step = shape.length * max(stage_time) + sync
    return StagePlan(shape, tuple(counts), tuple(recompute), stage_time, memory, sync, step, layer.plan,
                     reduce, tuple(counts[i] * dense + edges[i] for i in range(p)))


def _bottleneck_counts(p: int, n_layers: int, times: Mapping[bool, float], fixed_t: np.ndarray,
                       caps_mem: Mapping[bool, np.ndarray], least: int = 1) -> list[int] | None:
    """Layers per stage minimising the slowest stage's time (every stage at least ``least`` layers: one per
    chunk)."""
    ls = np.arange(1, n_layers + 1)
    candidates = np.unique(np.concatenate([(fixed_t[:, None] + ls[None, :] * t).ravel() for t in times.values()]))

    def capacity(bound: np.ndarray) -> np.ndarray:  # (p, len(bound)) layers each stage takes under each bound
        cap = np.full((p, bound.shape[0]), -1.0)
        for r, t in times.items():
            by_time = np.floor((bound[None, :] - fixed_t[:, None]) / t + 1e-9) if t > 0 else np.full_like(cap, n_layers)
            cap = np.maximum(cap, np.minimum(by_time, caps_mem[r][:, None]))
        return cap

    caps = capacity(candidates)
    ok = (caps.min(axis=0) >= least) & (caps.clip(0, None).sum(axis=0) >= n_layers)
    if not ok.any():
        return None
    cap = caps[:, int(np.argmax(ok))].astype(int)
    counts, left = [], n_layers
    for i in range(p):
        take = min(int(cap[i]), left - least * (p - 1 - i))  # leave enough for each later stage
        counts.append(take)
        left -= take
    return counts if left == 0 and min(counts) >= least else None


def shapes(cluster: Cluster, n_layers: int, global_batch: int, micros: Iterable[int], tps: Iterable[int],
           schedules: Iterable[str] = SCHEDULES, stage_counts: Iterable[int] | None = None,
           experts: int = 0) -> Iterable[Shape]:
    """Every parallel shape: stage counts dividing the devices (at most one stage per layer), tensor groups inside a
    node, replicas dividing the batch, at least as many micro-batches as stages whose size has a layer cost,
    both schedules and interleaved 1F1B's chunk counts (``schedules.schedule_options``), optimizer
    sharding on and off, and with ``experts`` routed experts (an MoE layer) every expert parallel ep dividing both
    the replicas and the experts (MindSpore's ``expert_parallel``: it divides ``data_parallel``)."""
    micros, tps = set(micros), sorted(set(tps))
    allowed = None if stage_counts is None else set(stage_counts)
    for p in divisors(cluster.devices):
        if p > n_layers:
            break
        if allowed is not None and p not in allowed:
            continue
        per_stage = cluster.devices // p
        for tp in tps:
            if per_stage % tp or tp > cluster.node_size:
                continue
            dp = per_stage // tp
            if global_batch % dp:
                continue
            for m in divisors(global_batch // dp):
                micro = global_batch // dp // m
                if micro not in micros or m < p:  # MindSpore (and the runtime) need micro_size >= stages
                    continue
                eps = [e for e in divisors(dp) if experts % e == 0] if experts > 1 else [1]
                for schedule, chunks in schedule_options(p, m, n_layers, tuple(schedules)):
                    for shard in ((False, True) if dp > 1 else (False,)):
                        for ep in eps:
                            yield Shape(p, tp, dp, m, micro, schedule, shard, ep, chunks)


def search_stages(layers: Mapping[tuple[int, int], LayerCost], n_layers: int, head: EdgeCost, tail: EdgeCost,
                  cluster: Cluster, global_batch: int, slots: float, top: int = 5,
                  stage_counts: Iterable[int] | None = None,
                  sequence: Mapping[tuple[int, int], LayerCost] | None = None,
                  bounded: Mapping[tuple[int, int], tuple[LayerCost, ...]] | None = None) -> StageSearch:
    """The best pipeline plan over every :func:`shapes` that has a layer cost (``layers[(tp, micro)]``), and the
    ``top`` best runners-up of other stage counts, tensor sizes or sequence parallel. ``stage_counts``: the stage
    counts allowed (None: every one; the user's ``pipeline_stages`` when set). ``sequence``: the layer's other
    sequence-parallel variant per (tp, micro) (:mod:`.sequence`), each priced as a shape of its own; ``bounded``:
    its weight-bounded plans per (tp, micro) (``compile.plans.stage_weights``), priced the same way."""
    tps = sorted({tp for tp, _ in layers})
    micros = sorted({m for _, m in layers})
    experts = max(layer.experts for layer in layers.values())
    plans: list[StagePlan] = []
    priced = 0
    for each in shapes(cluster, n_layers, global_batch, micros, tps, stage_counts=stage_counts, experts=experts):
        for shape, layer in variants(layers, sequence or {}, each, bounded):
            priced += 1
            plan = assign(shape, n_layers, layer, head, tail, cluster, slots)
            if plan is not None:
                plans.append(plan)
    plans.sort(key=lambda q: q.step_time)  # stable: the enumeration order breaks ties
    runners, seen = [], set()
    for q in plans:
        # one per stage count, tensor size, chunk count and sequence parallel (GPipe's plan of a shape takes 1F1B's
        # time with more memory: it follows 1F1B's and is not listed)
        key = (q.shape.stages, q.shape.tp, q.shape.chunks, q.shape.seq_parallel)
        if key in seen:
            continue
        if q is plans[0]:
            seen.add(key)
            continue
        seen.add(key)
        runners.append(q)
        if len(runners) == top:
            break
    return StageSearch(plans[0] if plans else None, tuple(runners), priced, len(plans))


def best_fixed(layers: Mapping[tuple[int, int], LayerCost], n_layers: int, head: EdgeCost, tail: EdgeCost,
               cluster: Cluster, global_batch: int, slots: float, tp: int,
               stage_counts: Iterable[int], optimizer_shard: bool = False, ep: int = 1,
               micro_batches: int | None = None, chunks: int = 1,
               sequence: Mapping[tuple[int, int], LayerCost] | None = None) -> StagePlan | None:
    """The best hand-set (Megatron-style) configuration priced by the same model: tensor ``tp`` (its layer costs
    ``layers[(tp, micro)]``), each stage count in ``stage_counts`` with data parallel over the rest, layers split
    evenly (an uneven count: one more on the last stages), the same recompute on every stage, 1F1B, optimizer
    sharding as given (Megatron's distributed optimizer), expert parallel ``ep``; the micro-batch count (or the
    ``micro_batches`` given) and recompute that fit and are fastest; with ``sequence`` (the layer's other
    sequence-parallel variants, :mod:`.sequence`) sequence parallel on or off, whichever is faster.
    ``chunks`` > 1: Megatron's interleaved 1F1B with that many chunks per stage (its rules: the layers divide
    into stages x chunks, the micro-batches into rounds of the stage count)."""
    best = None
    for p in stage_counts:
        if cluster.devices % (p * tp):
            continue
        dp = cluster.devices // (p * tp)
        if global_batch % dp:
            continue
        if dp % ep or (chunks > 1 and n_layers % (p * chunks)):
            continue
        for m in divisors(global_batch // dp) if micro_batches is None else [micro_batches]:
            if (global_batch // dp) % m or (chunks > 1 and m % p):
                continue
            fixed = Shape(p, tp, dp, m, global_batch // dp // m, "1f1b", optimizer_shard and dp > 1, ep, chunks)
            for shape, layer in variants(layers, sequence or {}, fixed):
                for rc in (False, True):
                    plan = assign(shape, n_layers, layer, head, tail, cluster, slots, fixed_recompute=rc, even=True)
                    if plan is not None and (best is None or plan.step_time < best.step_time):
                        best = plan
    return best
