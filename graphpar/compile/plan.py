"""Execution plans: where each array of a train step lives and how the per-device loss becomes the objective.

A plan answers three questions for the step builder (``compile.program``):

* ``state_sharding``: the sharding of a parameter, statistic or optimizer-state array;
* ``input_sharding``: the sharding of a global batch input;
* ``objective``: the scalar that is differentiated, the loss reported, and the updated non-trainable state.

``StandAlonePlan`` runs on one device. ``DataParallelPlan`` gives MindSpore's DATA_PARALLEL semantics exactly: each
device computes the user's loss on its own slice of the global batch (``jax.vmap`` over the device axis, sharded
over the mesh), and the gradient is that of the *sum* of the per-device losses, divided by the device count when
``gradients_mean=True``. The SEMI_AUTO/AUTO plan (``graphpar.parallel.planned``) differentiates the loss of the
global batch through the planned graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from graphpar.compile.replica import replica_axis
from graphpar.compile.state import NetworkState
from graphpar.errors import DatasetError
from graphpar.ir.recorder import cell_scope
from graphpar.parallel.mesh import make_mesh

REPLICA_AXIS = "graphpar_replica"


def call_network(model: Any, inputs: Sequence[Any]) -> Any:
    """Run the loss network as the root of the train step (scope ``Default``, as MindSpore's TrainOneStepCell)."""
    with cell_scope("Default"):
        return model(*inputs)


def _objective_of(loss: Any, sens: float) -> Any:
    loss = jnp.asarray(loss)
    if not jnp.issubdtype(loss.dtype, jnp.floating):
        raise TypeError(f"the network's loss must be a floating-point array, got {loss.dtype}")
    # MindSpore's gradient uses a sensitivity of `sens` for every element: the gradient of sum(sens * loss).
    return jnp.sum(loss.astype(jnp.float32)) * sens


class ExecutionPlan:
    """Base class of plans."""

    name = "plan"
    devices: list[jax.Device]
    mesh: Mesh | None = None
    draws = 1  # per-device batches this process draws per step (dataset_strategy="data_parallel")
    first_rank = 0  # rank of this process's first device in the plan

    def prepare(self, ns: NetworkState, inputs: Sequence[Any], purpose: str = "train") -> Any:
        """Plan for these (global-shaped) inputs before the step is jitted; plans that need no graph skip it."""
        return None

    def state_sharding(self, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        raise NotImplementedError

    def input_sharding(self, index: int, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        raise NotImplementedError

    def check_batch(self, shapes: Sequence[tuple[int, ...]]) -> None:
        """Raise a clear error if a global batch cannot be split as this plan needs."""

    def objective(self, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any], sens: float):
        """``(objective, (reported_loss, new_rest))``."""
        model = ns.merge(params, rest)
        loss = call_network(model, inputs)
        return _objective_of(loss, sens), (jnp.mean(jnp.asarray(loss, jnp.float32)), ns.split_after(model))

    def forward(self, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any]) -> Any:
        """The network's output on ``inputs`` (evaluation and prediction)."""
        return call_network(ns.merge(params, rest), inputs)


class StandAlonePlan(ExecutionPlan):
    """Everything on one device."""

    name = "stand_alone"

    def __init__(self, device: jax.Device):
        self.devices = [device]
        self._sharding = SingleDeviceSharding(device)

    def state_sharding(self, shape):
        return self._sharding

    def input_sharding(self, index, shape):
        return self._sharding


class DataParallelPlan(ExecutionPlan):
    """Batch split over every device, parameters replicated, per-device losses summed (or averaged)."""

    name = "data_parallel"

    def __init__(self, devices: Sequence[jax.Device], gradients_mean: bool, replicas: int | None = None):
        """``devices`` hold the computation; ``replicas`` (default: one per device) is the data-parallel degree.
        PYNATIVE runs all replicas on one device, with the same semantics."""
        self.devices = list(devices)
        self.replicas = replicas or len(self.devices)
        self.gradients_mean = gradients_mean
        local = [i for i, d in enumerate(self.devices) if d.process_index == jax.process_index()]
        self.draws = self.replicas if replicas else len(local)
        self.first_rank = local[0] if local and not replicas else 0
        if len(self.devices) > 1:
            self.mesh = make_mesh(self.devices)
            self._replicated = NamedSharding(self.mesh, PartitionSpec())
            self._batch_axes: tuple[str, ...] | None = tuple(self.mesh.axis_names)
            self._batch = NamedSharding(self.mesh, PartitionSpec(self._batch_axes))
        else:
            self._replicated = self._batch = SingleDeviceSharding(self.devices[0])
            self._batch_axes = None

    def state_sharding(self, shape):
        return self._replicated

    def input_sharding(self, index, shape):
        return self._batch if shape else self._replicated

    def check_batch(self, shapes):
        for i, shape in enumerate(shapes):
            if not shape or shape[0] % self.replicas:
                raise DatasetError(
                    f"DATA_PARALLEL on {self.replicas} devices: input {i} has global batch shape {tuple(shape)}, "
                    f"whose first dimension is not divisible by the data-parallel degree {self.replicas}; use a "
                    f"global batch size that is a multiple of {self.replicas}")

    def _split(self, x):
        return jnp.reshape(x, (self.replicas, x.shape[0] // self.replicas) + x.shape[1:])

    def objective(self, ns, params, rest, inputs, sens):
        def per_replica(local_inputs):
            model = ns.merge(params, rest)
            loss = call_network(model, local_inputs)
            return jnp.asarray(loss), ns.split_after(model)

        local = [self._split(x) for x in inputs]
        with replica_axis(REPLICA_AXIS):
            losses, new_rests = jax.vmap(per_replica, axis_name=REPLICA_AXIS,
                                         spmd_axis_name=self._batch_axes)(local)
        total = _objective_of(losses, sens)
        if self.gradients_mean:
            total = total / self.replicas
        # Each device updates its own statistics (BatchNorm moving averages); the replicas' values are averaged so
        # that every device keeps the same state, as a checkpoint of rank 0 would after a synchronised update.
        new_rest = jax.tree.map(lambda v: jnp.mean(v, axis=0).astype(v.dtype)
                                if jnp.issubdtype(v.dtype, jnp.floating) else v[0], new_rests)
        return total, (jnp.mean(losses.astype(jnp.float32)), new_rest)

    def forward(self, ns, params, rest, inputs):
        return call_network(ns.merge(params, rest), inputs)
