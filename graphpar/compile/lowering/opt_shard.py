"""The parallel optimizer in the compiled train step: parameters stored sharded, gathered for compute.

Given the compute sharding the plan wants for every trainable parameter, :class:`OptimizerSharding` decides the
storage sharding (``parallel.optimizer_parallel``) and applies it with shardings only, so XLA emits the
collectives:

* parameters and every optimizer-state leaf that mirrors one (Adam's moments, momentum) are jit in/out arguments
  with the *storage* sharding, so each device holds 1/g of them and runs 1/g of the update;
* :meth:`gather` turns the stored parameters into the compute layout at the start of the step (an all-gather) with
  a custom VJP whose backward constrains the gradient straight to the storage layout, so the data-parallel
  gradient sum becomes a reduce-scatter instead of an all-reduce;
* level3 differentiates through ``jax.checkpoint`` with a policy that saves only the activations (node outputs
  computed from the batch, ``compile.recompute``): the gathered parameters and what ops derive from them are
  recomputed, so the backward pass gathers them again instead of keeping them alive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding

from graphpar._logging import notice_once
from graphpar.compile.lowering.recompute import activations_only, naming_activations
from graphpar.planner.optimizer_parallel import (
    GATHERED, OPTED_OUT, OptimizerParallelConfig, ParameterShard, canonical_spec, shard_parameter)
from graphpar.planner.strategy import to_partition_spec


def _gather_fn(compute: jax.sharding.Sharding, storage: jax.sharding.Sharding) -> Callable[[Any], Any]:
    @jax.custom_vjp
    def gather(x):
        return jax.lax.with_sharding_constraint(x, compute)

    def fwd(x):
        return gather(x), None

    def bwd(_, g):
        return (jax.lax.with_sharding_constraint(g, storage),)

    gather.defvjp(fwd, bwd)
    return gather


class OptimizerSharding:
    """Storage and compute shardings of the trainable parameters of one train program."""

    def __init__(self, config: OptimizerParallelConfig, names: Sequence[str], values: Sequence[Any],
                 compute: Sequence[jax.sharding.Sharding]):
        self.config = config
        self.compute = list(compute)
        self.shards: list[ParameterShard] = []
        self.storage: list[jax.sharding.Sharding] = []
        for name, value, sh in zip(names, values, compute):
            shape = tuple(np.shape(value))
            if not config.enabled or not isinstance(sh, NamedSharding) or sh.mesh.size == 1:
                shard = ParameterShard(name, shape, (), (), reason="one device" if config.enabled else "off")
                self.shards.append(shard)
                self.storage.append(sh)
                continue
            mesh = sh.mesh
            spec = canonical_spec(sh.spec, len(shape))
            itemsize = np.dtype(getattr(value, "dtype", np.float32)).itemsize
            shard = shard_parameter(name, shape, itemsize, spec, mesh.axis_names, mesh.devices.shape, config)
            self.shards.append(shard)
            self.storage.append(NamedSharding(mesh, to_partition_spec(shard.storage_spec)) if shard.sharded else sh)
        if config.enabled:
            unsharded = [s for s in self.shards if not s.sharded and "threshold" not in s.reason and s.reason
                         and s.reason != OPTED_OUT]  # the user asked for it: nothing to say
            for s in unsharded:
                notice_once(f"opt-shard:{s.name}", f"parallel optimizer: Parameter '{s.name}' {s.shape} stays "
                            f"unsharded: {s.reason}")
        self._gathers = [_gather_fn(c, s) if shard.sharded else None
                         for c, s, shard in zip(self.compute, self.storage, self.shards)]

    @property
    def active(self) -> bool:
        return any(s.sharded for s in self.shards)

    def by_name(self) -> dict[str, ParameterShard]:
        return {s.name: s for s in self.shards}

    def gather(self, stored: Sequence[Any]) -> list[Any]:
        """The parameters in their compute layout (inside the traced step)."""
        out = []
        for x, g in zip(stored, self._gathers):
            if g is None:
                out.append(x)
                continue
            y = g(x)
            out.append(checkpoint_name(y, GATHERED) if self.config.regather_for_backward else y)
        return out

    def gather_for_recompute(self, stored: Sequence[Any]) -> list[Any]:
        """Level3 under a per-replica ``vmap``: a plain constraint to the compute layout, named so that
        :meth:`recompute_policy` drops it from the saved residuals (backward gathers again)."""
        return [x if not s.sharded else checkpoint_name(jax.lax.with_sharding_constraint(x, c), GATHERED)
                for x, s, c in zip(stored, self.shards, self.compute)]

    @staticmethod
    def recompute_policy() -> Callable[..., Any]:
        """Level3: keep only the activations (``compile.recompute``); the gathered weights and whatever the ops
        derive from them are recomputed, so backward gathers the weights again. Trace the differentiated function
        under :func:`~graphpar.compile.lowering.recompute.naming_activations`."""
        return activations_only()

    def value_and_grad(self, objective: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """``value_and_grad`` (with aux) of ``objective(compute_params)`` with respect to the stored parameters."""
        def stored_objective(stored):
            return objective(self.gather(stored))

        if not (self.active and self.config.regather_for_backward):
            return jax.value_and_grad(stored_objective, has_aux=True)
        differentiate = jax.value_and_grad(jax.checkpoint(stored_objective, policy=self.recompute_policy()),
                                           has_aux=True)

        def regathering(stored):
            with naming_activations():
                return differentiate(stored)

        return regathering

    def gradient(self, objective: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``compile.step``'s gradient part: ``value_and_grad`` of ``objective(params)`` (a pytree of compute-layout
        parameters, in ``ns.params`` order) with respect to the stored parameters."""
        def value_and_grad(stored_tree):
            leaves, treedef = jax.tree.flatten(stored_tree)
            out, grads = self.value_and_grad(lambda p: objective(jax.tree.unflatten(treedef, p)))(leaves)
            return out, jax.tree.unflatten(treedef, grads)

        return value_and_grad

    def to_storage(self, grads: Sequence[Any]) -> list[Any]:
        """Gradients put in the storage layout (a reduce-scatter where they are still partial sums)."""
        return [g if not s.sharded else jax.lax.with_sharding_constraint(g, st)
                for g, s, st in zip(grads, self.shards, self.storage)]
