"""Gradient accumulation in the compiled train step: micro-batches in a ``lax.scan``, one reduction per step.

The global batch is cut into ``micro_size`` micro-batches *device-locally*: each device's rows of the batch are split
into ``micro_size`` slices and micro-batch ``i`` is slice ``i`` of every device, so cutting moves no data. (MindSpore
cuts the batch into contiguous slices; every sample still lands in exactly one micro-batch of the same size, so the
accumulated gradient of any per-sample loss is the same.) Every input is cut by the same blocks of rows — the
fewest devices any batched input's first dimension is split over (:func:`cut_blocks`) — so micro-batch ``i`` of
the ids and of the labels hold the same samples even when the plan splits them over different device counts (a
label vector of ``batch * seq`` tokens split further than the ``(batch, seq)`` ids); only then may cutting move
data. The plan is traced and planned once for the micro-batch shape; the scan runs it ``micro_size`` times and
carries the parameters' gradients, the non-trainable state (each micro-batch sees the statistics the previous one
left, as MindSpore's sequential micro-batches do) and the loss.

Where the gradients are reduced:

* DATA_PARALLEL: each replica differentiates its own loss (``vmap`` of ``value_and_grad``), so the scan carries
  per-replica gradients with a leading replica axis, sharded over the devices: no communication inside the scan.
  After it, one sum over that axis (one all-reduce per gradient, or a reduce-scatter into the parallel optimizer's
  storage layout) — exactly one gradient reduction per optimizer step.
* SEMI_AUTO/AUTO whose planned graph splits into data-parallel replicas (``compile.replica_split``): the same, with
  one replica's planned graph under ``vmap(spmd_axis_name=<data-parallel axes>)``; its model-parallel layouts and
  collectives stay inside each micro-batch. A loss that goes on computing after its reductions over the batch
  makes each reduction global per micro-batch (:func:`_global_value`: a scalar-sized ``pmean``/``psum``), so
  every replica computes the global loss and the mean of their gradients is the global gradient.
* With the parallel optimizer at level2/level3 or ``gradient_accumulation_shard``, the carry is kept in the
  sharded storage layout instead: a reduce-scatter per micro-batch, 1/g of the accumulation memory.
* Other SEMI_AUTO/AUTO graphs and STAND_ALONE: the gradient of each micro-batch's planned global loss is
  accumulated; XLA reduces partial sums inside each micro-batch (JAX's auto-sharding mode has no public
  "unreduced" layout to carry them), so these plans reduce once per micro-batch (said once, with the reason).
  STAND_ALONE has nothing to reduce.

The loss reported is the sum of the micro-batch losses, as MindSpore's wrapper returns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from graphpar._logging import notice_once
from graphpar.communication.rank_axis import replica_axis
from graphpar.compile.lowering.interpret import Overrides, combinable, evaluate
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.lowering.opt_shard import OptimizerSharding
from graphpar.compile.lowering.plan import lowering_plan
from graphpar.compile.lowering.recompute import naming_activations
from graphpar.compile.lowering.step import StepParts
from graphpar.compile.plans.execution import REPLICA_AXIS, DataParallelPlan, ExecutionPlan, _objective_of
from graphpar.compile.plans.replica_split import ReplicaSplit, plan_graph, replica_split
from graphpar.compile.staging.cache import ProgramKey
from graphpar.errors import DatasetError
from graphpar.planner.optimizer_parallel import canonical_spec
from graphpar.planner.strategy import to_partition_spec


def dim0_split(sharding: Any) -> int:
    """How many devices split dimension 0 under ``sharding`` (1 when it is not split)."""
    if not isinstance(sharding, NamedSharding) or not tuple(sharding.spec) or sharding.spec[0] is None:
        return 1
    axes = sharding.spec[0]
    axes = (axes,) if isinstance(axes, str) else tuple(axes)
    return int(np.prod([sharding.mesh.shape[a] for a in axes]))


def micro_avals(avals: Sequence[jax.ShapeDtypeStruct], micro: int) -> list[jax.ShapeDtypeStruct]:
    """The avals of one micro-batch (what the plan traces)."""
    return [jax.ShapeDtypeStruct((a.shape[0] // micro,) + tuple(a.shape[1:]), a.dtype) if a.shape else a
            for a in avals]


def cut_blocks(shapes: Sequence[tuple[int, ...]], splits: Sequence[int]) -> int:
    """How many blocks of rows every batched input is cut in before its micro-batches are taken (the same for all
    inputs, see the module docstring): the smallest first-dimension split when it divides all the others, else 1
    (contiguous micro-batches, as MindSpore cuts them)."""
    batched = [d for shape, d in zip(shapes, splits) if shape]
    if not batched:
        return 1
    least = min(batched)
    return least if all(d % least == 0 for d in batched) else 1


def check_batch(shapes: Sequence[tuple[int, ...]], micro: int, splits: Sequence[int]) -> None:
    """Every batched input must cut into ``micro`` equal micro-batches in every block of rows."""
    d = cut_blocks(shapes, splits)
    for i, shape in enumerate(shapes):
        if shape and shape[0] % (d * micro):
            raise DatasetError(
                f"gradient accumulation (micro_size={micro}): input {i} has global batch shape {tuple(shape)}; its "
                f"first dimension, cut in {d} block(s) of rows (one per device splitting the inputs), must divide "
                f"into {micro} equal micro-batches per block; use a global batch size that is a multiple of "
                f"{d * micro}")


def _stack(x: Any, micro: int, sharding: Any, d: int) -> Any:
    """``x`` as ``(micro, rows per micro-batch, ...)``, micro-batch ``i`` taking slice ``i`` of each of the ``d``
    blocks of rows."""
    b = x.shape[0] // (d * micro)
    y = jnp.swapaxes(x.reshape((d, micro, b) + x.shape[1:]), 0, 1).reshape((micro, d * b) + x.shape[1:])
    if isinstance(sharding, NamedSharding):
        y = jax.lax.with_sharding_constraint(y, NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec)))
    return y


def _constrain(x: Any, sharding: Any) -> Any:
    return jax.lax.with_sharding_constraint(x, sharding) if isinstance(sharding, NamedSharding) else x


def train_step(plan: ExecutionPlan, planned: Any, ns: NetworkState, opt: OptimizerSharding, parts: StepParts,
               sens: float, micro: int, split: ReplicaSplit | None = None) -> Callable[..., Any]:
    """``compile.step.train_step`` with the gradient of ``micro`` micro-batches (``parts``' objective, parameter
    cast, gradient transform and update are kept); ``split``: a planned graph's per-replica form."""
    names = ns.param_names()
    layout = planned.layout

    def step(pvals, rvals, opt_state, inputs):
        shardings = [layout.input_sharding(i, tuple(np.shape(x))) for i, x in enumerate(inputs)]
        scale = parts.loss_scale(opt_state)  # mixed precision: the objective is scaled, the update unscales
        (loss, new_rest), grads = accumulated_value_and_grad(plan, planned, ns, opt, parts, list(pvals), list(rvals),
                                                             inputs, sens, micro, shardings, scale, split)
        pdict = dict(zip(names, pvals))
        gdict = parts.transform_gradients(dict(zip(names, grads)), pdict)
        new, opt_state = parts.update(gdict, opt_state, pdict)
        return [new[n] for n in names], new_rest, opt_state, loss

    return step


@dataclass(frozen=True)
class Replicas:
    """The per-replica form of a step: ``loss_and_state(params, rest, inputs)`` runs one replica's rows, the
    replicas split ``axes`` of ``mesh`` (None: one device runs them all), and the objective is the replicas'
    sum, divided by their number when ``mean``."""

    loss_and_state: Callable[[Any, Any, Sequence[Any]], tuple[Any, Any]]
    replicas: int
    mesh: Any
    axes: tuple[str, ...] | None
    mean: bool
    collectives_axis: bool  # DATA_PARALLEL: collective ops in construct reduce over the replica axis

    def split(self, x: Any) -> Any:
        return jnp.reshape(x, (self.replicas, x.shape[0] // self.replicas) + x.shape[1:])

    def sharding(self) -> NamedSharding | None:
        return NamedSharding(self.mesh, PartitionSpec(self.axes)) if self.mesh is not None and self.axes else None


def _replicas_of(plan: ExecutionPlan, planned: Any, ns: NetworkState, split: ReplicaSplit | None) -> Replicas | None:
    if isinstance(plan, DataParallelPlan):
        def dp_loss(params, rest, inputs):
            return plan._loss_and_state(planned, ns, params, rest, inputs)

        return Replicas(dp_loss, plan.replicas, plan.mesh, plan._batch_axes, plan.gradients_mean, True)
    if split is None:
        return None
    vmapped = frozenset(split.axes)
    overrides = Overrides(
        combine={vid: functools.partial(_global_value, mean=mean, replicas=split.replicas)
                 for vid, mean in split.combine},
        consts=dict(split.constants),
        bodies={nid: _synced_batch_norm(split.graph.nodes[nid].attrs["epsilon"]) for nid in split.synced})

    def planned_loss(params, rest, inputs):
        flat = jax.tree.leaves(params) + jax.tree.leaves(rest) + list(inputs)
        loss, *new_rest = evaluate(split.graph, flat, split.mesh, vmapped_axes=vmapped,
                                   channels_last=plan.channels_last, overrides=overrides)
        return loss, ns.rest.unflatten(new_rest)

    return Replicas(planned_loss, split.replicas, split.mesh, split.axes, split.mean, False)


def _global_value(local: Any, mean: bool, replicas: int) -> Any:
    """One replica's batch reduction ``local``, given the value of the whole batch's (the replicas' mean or sum)
    and the derivative of its own rows (``replicas`` times it for a sum, so that the mean of the replicas'
    gradients is the global one; ``compile.plans.replica_split``)."""
    own = jax.lax.stop_gradient(local)
    whole = jax.lax.pmean(own, REPLICA_AXIS) if mean else jax.lax.psum(own, REPLICA_AXIS)
    return whole + (1 if mean else replicas) * (local - own)


def _synced_batch_norm(epsilon: float) -> Callable[[Sequence[Any]], list[Any]]:
    """A training-mode BatchNorm node's body for one replica (``BatchNorm.compute`` with statistics over every
    replica's rows): ``(x, scale, bias, mean, variance) -> (y, batch mean, batch variance)``."""
    def body(xs: Sequence[Any]) -> list[Any]:
        x, scale, bias = xs[0], xs[1], xs[2]
        axes = tuple(i for i in range(x.ndim) if i != 1)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        mean = jax.lax.pmean(jnp.mean(x, axis=axes), REPLICA_AXIS)
        var = jax.lax.pmean(jnp.mean(jnp.square(x - jnp.reshape(mean, shape)), axis=axes), REPLICA_AXIS)
        inv = jax.lax.rsqrt(var + epsilon) * scale
        return [(x - jnp.reshape(mean, shape)) * jnp.reshape(inv, shape) + jnp.reshape(bias, shape), mean, var]

    return body


def accumulated_value_and_grad(plan: ExecutionPlan, planned: Any, ns: NetworkState, opt: OptimizerSharding,
                               parts: StepParts, stored: list[Any], rvals: list[Any], inputs: Sequence[Any],
                               sens: float, micro: int, input_shardings: Sequence[Any],
                               scale: Any = None, split: ReplicaSplit | None = None
                               ) -> tuple[tuple[Any, list[Any]], list[Any]]:
    """``((summed loss, new rest leaves), gradients in the parameters' storage layout)`` of one accumulated step."""
    d = cut_blocks([tuple(np.shape(x)) for x in inputs], [dim0_split(s) for s in input_shardings])
    stacks = [_stack(x, micro, s, d) if np.ndim(x) else None for x, s in zip(inputs, input_shardings)]

    def micro_inputs(xs: Sequence[Any]) -> list[Any]:
        return [x if st is None else m for x, st, m in zip(inputs, stacks, xs)]

    scan_xs = [s if s is not None else jnp.zeros((micro,), jnp.int32) for s in stacks]
    compute = opt.gather(stored)
    shard_carry = opt.config.shard_accumulated_gradients and opt.active and micro > 1
    replicas = _replicas_of(plan, planned, ns, split)
    if replicas is not None:
        return _per_replica(replicas, ns, opt, parts, stored, compute, rvals, micro_inputs, scan_xs,
                            sens if scale is None else sens * scale, shard_carry)

    def body(carry, xs):
        acc, rest, loss_sum = carry

        def objective(p):
            obj, (loss, new_rest) = parts.objective(parts.cast_params(ns.params.unflatten(p)),
                                                    ns.rest.unflatten(rest), micro_inputs(xs))
            return (obj if scale is None else obj * scale), (loss, jax.tree.leaves(new_rest))

        (_, (loss, new_rest)), g = jax.value_and_grad(objective, has_aux=True)(compute)
        g = opt.to_storage(g) if shard_carry else g
        acc = [a + gi.astype(a.dtype) for a, gi in zip(acc, g)]
        return (acc, new_rest, loss_sum + loss.astype(jnp.float32)), None

    zeros = [jnp.zeros_like(p) for p in (stored if shard_carry else compute)]
    (acc, rest, loss), _ = jax.lax.scan(body, (zeros, list(rvals), jnp.zeros((), jnp.float32)), scan_xs)
    return (loss, rest), opt.to_storage(acc)


def reduce_replicas(replicas: Replicas, opt: OptimizerSharding, stacked: list[Any]) -> list[Any]:
    """Sum per-replica gradients ``(replicas, *shape)`` over the replicas, straight into each parameter's storage
    layout: a reduce-scatter over its sharding group (``jax.lax.psum_scatter`` under ``shard_map`` over the
    replica axes, the model-parallel axes left to XLA, so every backend emits one, not an all-reduce and a slice)
    and a sum over the remaining replica axes; an all-reduce for parameters stored whole."""
    axes = replicas.axes or ()
    out = []
    for a, shard, compute in zip(stacked, opt.shards, opt.compute):
        group = shard.group_axes
        if not shard.sharded or replicas.mesh is None or not set(group) <= set(axes):
            s = jnp.sum(a, axis=0)
            out.append(s if not shard.sharded else jax.lax.with_sharding_constraint(s, opt.storage[len(out)]))
            continue
        others = tuple(x for x in axes if x not in group)
        inner = canonical_spec(compute.spec, a.ndim - 1)

        def reduce(x, group=group, others=others):
            y = jax.lax.psum_scatter(x[0], group, scatter_dimension=0, tiled=True)
            return jax.lax.psum(y, others) if others else y

        manual = frozenset(axes) | {m for dim in inner for m in dim}
        out.append(jax.shard_map(reduce, mesh=replicas.mesh, in_specs=to_partition_spec(((*axes,),) + inner),
                                 out_specs=to_partition_spec(shard.storage_spec), axis_names=manual,
                                 check_vma=False)(a))
    return out


def uses_replica_gradients(plan: ExecutionPlan, opt: OptimizerSharding, micro: int,
                           split: ReplicaSplit | None = None) -> bool:
    """Whether the step runs in this module rather than ``compile.step``: gradient accumulation, or sharded
    parameters of a per-replica step (DATA_PARALLEL, or a ``split`` planned one: the explicit reduce-scatter)."""
    return micro > 1 or (opt.active and (isinstance(plan, DataParallelPlan) or split is not None))


def _per_replica(replicas: Replicas, ns: NetworkState, opt: OptimizerSharding, parts: StepParts,
                 stored: list[Any], compute: list[Any], rvals: list[Any], micro_inputs: Any, scan_xs: list[Any],
                 sens: float, shard_carry: bool):
    n = replicas.replicas
    axes = replicas.axes
    per_replica_sharding = replicas.sharding()
    regather = opt.config.regather_for_backward and opt.active

    def per_replica(p, rest, local_inputs):
        def objective(p):
            if regather:  # level3: p is the stored parameters; backward gathers them again
                p = opt.gather_for_recompute(p)
            loss, new_rest = replicas.loss_and_state(parts.cast_params(ns.params.unflatten(p)),
                                                     ns.rest.unflatten(rest), local_inputs)
            return _objective_of(loss, sens), (jnp.asarray(loss), jax.tree.leaves(new_rest))

        if not regather:
            (_, (loss, new_rest)), g = jax.value_and_grad(objective, has_aux=True)(p)
            return g, loss, new_rest
        with naming_activations():  # level3: backward keeps the activations only and gathers the weights again
            (_, (loss, new_rest)), g = jax.value_and_grad(jax.checkpoint(objective, policy=opt.recompute_policy()),
                                                          has_aux=True)(p)
        return g, loss, new_rest

    def body(carry, xs):
        acc, rest, loss_sum = carry
        local = [replicas.split(x) for x in micro_inputs(xs)]
        run = jax.vmap(per_replica, in_axes=(None, None, 0), axis_name=REPLICA_AXIS, spmd_axis_name=axes)
        # level3: the stored parameters enter each micro-batch in their storage layout. Unconstrained inside the
        # loop, the compute layout their gathers ask for may propagate onto the loop's carried value (Shardy in
        # jax 0.12 does): the weights are then gathered once before the loop, kept alive through it, and
        # backward gathers nothing again.
        params = [_constrain(p, st) for p, st in zip(p_compute, opt.storage)] if regather else p_compute
        if replicas.collectives_axis:
            with replica_axis(REPLICA_AXIS):
                g, losses, new_rests = run(params, rest, local)
        else:
            g, losses, new_rests = run(params, rest, local)
        new_rest = [jnp.mean(v, axis=0).astype(v.dtype) if jnp.issubdtype(v.dtype, jnp.floating) else v[0]
                    for v in new_rests]
        if shard_carry:  # reduce each micro-batch's gradients into the sharded storage layout
            g = reduce_replicas(replicas, opt, g)
        else:  # keep each replica's own gradient: nothing crosses devices inside the scan
            g = [_constrain(gi, _stacked_sharding(per_replica_sharding, c)) for gi, c in zip(g, opt.compute)]
        acc = [a + gi.astype(a.dtype) for a, gi in zip(acc, g)]
        # each replica's loss too is summed locally, and combined over replicas once after the scan
        return (acc, new_rest, loss_sum + _constrain(losses.astype(jnp.float32), per_replica_sharding)), None

    p_compute = stored if regather else compute
    if shard_carry:
        zeros = [_constrain(jnp.zeros(p.shape, p.dtype), st) for p, st in zip(compute, opt.storage)]
    else:
        zeros = [_constrain(jnp.zeros((n,) + p.shape, p.dtype), _stacked_sharding(per_replica_sharding, c))
                 for p, c in zip(compute, opt.compute)]
    losses0 = _constrain(jnp.zeros((n,), jnp.float32), per_replica_sharding)
    (acc, rest, losses), _ = jax.lax.scan(body, (zeros, list(rvals), losses0), scan_xs)
    loss = jnp.mean(losses) if replicas.collectives_axis or replicas.mean else jnp.sum(losses)
    if not shard_carry:
        acc = reduce_replicas(replicas, opt, acc)  # the one gradient reduction of the step
    if replicas.mean:
        acc = [a / n for a in acc]
    return (loss, rest), acc


def _stacked_sharding(replica_sharding: NamedSharding | None, compute: Any) -> NamedSharding | None:
    """Per-replica values ``(replicas, *shape)``: the replica axis split like the replicas, the rest as ``compute``
    lays the parameter out."""
    if replica_sharding is None:
        return None
    inner = tuple(compute.spec) if isinstance(compute, NamedSharding) else ()
    return NamedSharding(replica_sharding.mesh, PartitionSpec(replica_sharding.spec[0], *inner))


def planned_split(plan: ExecutionPlan, planned: Any, ns: NetworkState, opt: OptimizerSharding, micro: int,
                  cache: Any) -> ReplicaSplit | None:
    """A SEMI_AUTO/AUTO step's per-replica form, when it accumulates gradients or shards parameters (so its
    data-parallel reduction happens once per step, as a reduce-scatter into the shards); None otherwise.
    ``cache``: the program's compile cache (the replica graph is planned once per program, and counted)."""
    if isinstance(plan, DataParallelPlan) or plan.pynative or planned.graph is None or not (micro > 1 or opt.active):
        return None
    whole = planned.graph
    avals = [jax.ShapeDtypeStruct(tuple(whole.values[v].shape), whole.values[v].dtype)
             for v in whole.inputs if whole.values[v].kind == "input"]

    def plan_replica(replica_avals: list[jax.ShapeDtypeStruct]) -> Any:
        key = ProgramKey.of("train", ns.structure, replica_avals, ("replica",))

        def build():
            built = plan_graph(plan, ns, replica_avals)
            cache.count("traces")
            cache.count("plans")
            return built

        return cache.planned.get_or_build(key, build)[0].graph

    if micro > 1:
        why, fallback = "gradient accumulation", "the data-parallel gradient reduction is made once per micro-batch"
    else:
        why, fallback = ("the parallel optimizer", "XLA reduces the gradients into the shards itself (on CPU an "
                         "all-reduce and a local slice: 1.5x a reduce-scatter's bytes)")
    split = replica_split(whole, plan.mesh, avals, plan_replica, why, fallback)
    if split is not None and split.synced and plan.channels_last:
        notice_once(f"replica-split:{why}:channels-last", f"{why}: {fallback} because BatchNorm runs channels-last "
                    "here (its per-replica statistics are written for channels-first)")
        return None
    if split is not None and split.combine:
        lowering = lowering_plan(split.graph, split.mesh, frozenset(split.axes), False, plan.channels_last)
        if not {vid for vid, _ in split.combine} <= combinable(lowering):
            notice_once(f"replica-split:{why}:inner", f"{why}: {fallback} because a reduction over the batch that "
                        "the loss goes on computing with lies inside a repeated run of ops (one function every "
                        "repetition calls)")
            return None
    return split
