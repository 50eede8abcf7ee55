"""Execution plans: where each array of a program lives and how the per-device loss becomes the objective.

Every plan answers the same protocol for ``compile.orchestrate`` and the step builder:

* ``trace``: the network's step or forward traced into the graph IR (``compile.graph_trace``);
* ``request``: what planning that graph reads (a ``planner.passes.context.PlanRequest``: devices, modes, mesh,
  dataset strategy, strategy file, search settings, optimizer slots, the dump note);
* ``layout``: the planned graph's :class:`~graphpar.compile.plans.layout.Layout` (parameter, state and input shardings);
* ``objective`` / ``forward``: the function of a *planned* graph that is differentiated / evaluated.

``StandAlonePlan`` runs on one device. ``DataParallelPlan`` gives MindSpore's DATA_PARALLEL semantics exactly: each
device computes the user's loss on its own slice of the global batch (``jax.shard_map`` over the devices; a
``jax.vmap`` over the replica axis where one device holds them), and the gradient is that of the *sum* of the
per-device losses, divided by the device count when ``gradients_mean=True``. The SEMI_AUTO/AUTO plan
(``graphpar.compile.plans.semi_auto``) differentiates the loss of the global batch through the planned graph. In
GRAPH_MODE every plan evaluates its traced graph with
``compile.interpret`` (so dumps can attribute collectives); PYNATIVE_MODE runs the Python network eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from graphpar import _context
from graphpar.communication.devices import all_devices, local_ranks
from graphpar.communication.rank_axis import replica_axis
from graphpar.compile.lowering import channels_last
from graphpar.compile.lowering.graph_trace import call_network, trace_network
from graphpar.compile.lowering.interpret import evaluate
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.layout import Layout, UniformLayout
from graphpar.compile.plans.per_device import per_device, reduces_in_own_dtype
from graphpar.compile.plans.planned import Planned, Traced
from graphpar.errors import DatasetError
from graphpar.ir.graph import Graph
from graphpar.planner.mesh import make_mesh
from graphpar.planner.passes.context import PlanRequest
from graphpar.planner.strategy import MeshInfo

REPLICA_AXIS = "graphpar_replica"

__all__ = ["ExecutionPlan", "StandAlonePlan", "DataParallelPlan", "call_network", "REPLICA_AXIS"]


def _objective_of(loss: Any, sens: float) -> Any:
    loss = jnp.asarray(loss)
    if not jnp.issubdtype(loss.dtype, jnp.floating):
        raise TypeError(f"the network's loss must be a floating-point array, got {loss.dtype}")
    # MindSpore's gradient uses a sensitivity of `sens` for every element: the gradient of sum(sens * loss).
    return jnp.sum(loss.astype(jnp.float32)) * sens


def _flat(params: Any, rest: Any, inputs: Sequence[Any]) -> list[Any]:
    return jax.tree.leaves(params) + jax.tree.leaves(rest) + list(inputs)


class ExecutionPlan:
    """Base class of plans (see the module docstring for the protocol)."""

    name = "plan"
    devices: list[jax.Device]
    mesh: Mesh | None = None
    pynative = False
    draws = 1  # per-device batches this process draws per step (dataset_strategy="data_parallel")
    first_rank = 0  # rank of this process's first device in the plan

    def __init__(self) -> None:
        self.pctx = _context.current_parallel()
        self.format_transform = _context.current().format_transform

    @property
    def channels_last(self) -> bool:
        """Whether convolutions run channels-last in this plan's programs (``compile.lowering.channels_last``): the
        ``format_transform`` setting in force when the plan was made, on this plan's platform."""
        return channels_last.enabled(self.format_transform, self.devices[0].platform)

    @property
    def n(self) -> int:
        return len(self.devices)

    # --- tracing and planning ----------------------------------------------------------------------------------
    def trace_avals(self, inputs: Sequence[Any], purpose: str) -> list[jax.ShapeDtypeStruct]:
        """The input avals the traced graph takes (the global batch by default)."""
        return list(inputs)

    def trace(self, ns: NetworkState, inputs: Sequence[Any], purpose: str, call: Any = None,
              defer_input_checks: bool = False) -> Traced:
        """The network's ``purpose`` graph for these global input avals (``call``, ``defer_input_checks``: see
        ``trace_network``)."""
        graph, out_treedef = trace_network(ns, self.trace_avals(inputs, purpose), purpose, call=call,
                                           defer_input_checks=defer_input_checks)
        return Traced(graph, purpose, out_treedef)

    def request(self, graph: Graph, purpose: str) -> PlanRequest:
        """What planning ``graph`` (traced for ``purpose``) reads under this plan (``planner.planning.plan_graph``).
        Here: the graph runs whole on each device (replicas, if any, are outside it), on a one-device mesh."""
        return PlanRequest(1, self.pctx.parallel_mode, self.pctx.search_mode, purpose,
                           mesh=MeshInfo(("m0",), (1,)), note=self.dump_note, replicated=True)

    dump_note = ""

    def layout(self, graph: Graph | None) -> Layout:
        raise NotImplementedError

    def check_batch(self, shapes: Sequence[tuple[int, ...]]) -> None:
        """Raise a clear error if a global batch cannot be split as this plan needs."""

    # --- the computation ---------------------------------------------------------------------------------------
    def _mesh_for_pins(self) -> Mesh | None:
        """The mesh the interpreter pins layouts on (None: the graph's layouts are not pinned)."""
        return None

    def _loss_and_state(self, planned: Planned, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any]):
        if self.pynative:
            model = ns.merge(params, rest)
            return call_network(model, inputs), ns.split_after(model)
        loss, *new_rest = evaluate(planned.graph, _flat(params, rest, inputs), self._mesh_for_pins(),
                                   channels_last=self.channels_last)
        return loss, ns.rest.unflatten(new_rest)

    def objective(self, planned: Planned, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any],
                  sens: float):
        """``(objective, (reported_loss, new_rest))``: the scalar differentiated, the loss the step returns."""
        loss, new_rest = self._loss_and_state(planned, ns, params, rest, inputs)
        return _objective_of(loss, sens), (jnp.mean(jnp.asarray(loss, jnp.float32)), new_rest)

    def forward(self, planned: Planned, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any]):
        """``(outputs, new_rest)``: the network's outputs on ``inputs`` and its state after the call."""
        if self.pynative:
            model = ns.merge(params, rest)
            return call_network(model, inputs), ns.split_after(model)
        if planned.graph is None:
            raise RuntimeError("graphpar: a GRAPH_MODE forward needs a planned graph")
        flat = evaluate(planned.graph, _flat(params, rest, inputs), self._mesh_for_pins(),
                        channels_last=self.channels_last)
        n_out = planned.out_treedef.num_leaves
        return jax.tree.unflatten(planned.out_treedef, flat[:n_out]), ns.rest.unflatten(flat[n_out:])


class StandAlonePlan(ExecutionPlan):
    """Everything on one device."""

    name = "stand_alone"
    dump_note = "stand-alone: the whole graph runs on one device"

    def __init__(self, device: jax.Device, pynative: bool = False):
        super().__init__()
        self.devices = [device]
        self.pynative = pynative
        sharding = SingleDeviceSharding(device)
        self._layout = UniformLayout(sharding, sharding)
        self.first_rank = all_devices().index(device) if device in all_devices() else 0

    def layout(self, graph):
        return self._layout


class DataParallelPlan(ExecutionPlan):
    """Batch split over every device, parameters replicated, per-device losses summed (or averaged)."""

    name = "data_parallel"

    def __init__(self, devices: Sequence[jax.Device], gradients_mean: bool, replicas: int | None = None,
                 pynative: bool = False):
        """``devices`` hold the computation; ``replicas`` (default: one per device) is the data-parallel degree.
        PYNATIVE runs all replicas on one device, with the same semantics."""
        super().__init__()
        self.devices = list(devices)
        self.replicas = replicas or len(self.devices)
        self.pynative = pynative
        self.gradients_mean = gradients_mean
        local = local_ranks(self.devices)
        self.draws = self.replicas if len(self.devices) == 1 else len(local)
        self.first_rank = local[0] if local and len(self.devices) > 1 else 0
        if len(self.devices) > 1:
            self.mesh = make_mesh(self.devices)
            self._batch_axes: tuple[str, ...] | None = tuple(self.mesh.axis_names)
            self._layout = UniformLayout(NamedSharding(self.mesh, PartitionSpec()),
                                         NamedSharding(self.mesh, PartitionSpec(self._batch_axes)), self.mesh)
        else:
            one = SingleDeviceSharding(self.devices[0])
            self._layout = UniformLayout(one, one)
            self._batch_axes = None

    @property
    def dump_note(self) -> str:
        return (f"data parallel: each of the {self.replicas} devices runs this graph on its slice of the batch; "
                "gradients are reduced across devices")

    def layout(self, graph):
        return self._layout

    def check_batch(self, shapes):
        for i, shape in enumerate(shapes):
            if not shape or shape[0] % self.replicas:
                raise DatasetError(
                    f"DATA_PARALLEL on {self.replicas} devices: input {i} has global batch shape {tuple(shape)}, "
                    f"whose first dimension is not divisible by the data-parallel degree {self.replicas}; use a "
                    f"global batch size that is a multiple of {self.replicas}")

    def trace(self, ns, inputs, purpose, call=None, defer_input_checks=False):
        if purpose != "train":  # evaluation needs no per-replica semantics: the global graph, batch split
            return super().trace(ns, inputs, purpose, call, defer_input_checks)
        # one replica's graph, traced with the replica axis bound so that collectives in construct see it; a
        # deferred check of a batch input is made on the global batch, which holds every replica's slice
        with replica_axis(REPLICA_AXIS):
            graph, out_treedef = trace_network(ns, self.trace_avals(inputs, purpose), purpose,
                                               axis_env=[(REPLICA_AXIS, self.replicas)],
                                               defer_input_checks=defer_input_checks, unplaced=True)
        return Traced(graph, purpose, out_treedef)

    def trace_avals(self, inputs, purpose):
        if purpose != "train":
            return list(inputs)
        # the graph each replica runs: its slice of the batch
        return [jax.ShapeDtypeStruct((x.shape[0] // self.replicas,) + tuple(x.shape[1:]), x.dtype)
                if x.shape else x for x in inputs]

    def _split(self, x):
        return jnp.reshape(x, (self.replicas, x.shape[0] // self.replicas) + x.shape[1:])

    def _per_device(self, planned: Planned, params: Any) -> bool:
        """Whether the replicas run as each device's own program (``compile.plans.per_device``: the program a JAX
        user writes) rather than a ``jax.vmap`` over the device axis. The ``vmap`` stays where one device holds
        several replicas (or all, in PYNATIVE_MODE, whose eager network is no traced graph) and where a parameter
        meets the batch in another floating type (mixed precision), whose gradient the ``vmap`` reduces in that
        type (``per_device.reduces_in_own_dtype``). State besides the trainable parameters (BatchNorm's moving
        statistics) takes the same path: from the same state both give the same step to float32 rounding
        (``tests/train/test_data_parallel.py``)."""
        return (self.mesh is not None and not self.pynative and self.replicas == len(self.devices)
                and reduces_in_own_dtype(planned.graph, len(jax.tree.leaves(params))))

    def objective(self, planned, ns, params, rest, inputs, sens):
        def per_replica(params, rest, local_inputs):
            loss, new_rest = self._loss_and_state(planned, ns, params, rest, local_inputs)
            return jnp.asarray(loss), new_rest

        with replica_axis(REPLICA_AXIS):
            if self._per_device(planned, params):
                losses, new_rests, stacked = per_device(per_replica, planned.graph, self.mesh, REPLICA_AXIS,
                                                        params, rest, inputs)
                stacked = [True] + stacked
            else:
                losses, new_rests = jax.vmap(per_replica, in_axes=(None, None, 0), axis_name=REPLICA_AXIS,
                                             spmd_axis_name=self._batch_axes)(
                    params, rest, [self._split(x) for x in inputs])
                stacked = [True] * (1 + len(jax.tree.leaves(new_rests)))
        total = _objective_of(losses, sens)
        if self.gradients_mean:
            total = total / self.replicas
        # Each device updates its own statistics (BatchNorm moving averages); the replicas' values are averaged so
        # that every device keeps the same state, as a checkpoint of rank 0 would after a synchronised update.
        leaves, tree = jax.tree.flatten(new_rests)
        new_rest = jax.tree.unflatten(tree, [
            v if not s else jnp.mean(v, axis=0).astype(v.dtype) if jnp.issubdtype(v.dtype, jnp.floating) else v[0]
            for v, s in zip(leaves, stacked[1:])])
        return total, (jnp.mean(losses.astype(jnp.float32)), new_rest)
