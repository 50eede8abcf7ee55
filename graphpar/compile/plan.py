"""Execution plans: where each array of a train step lives and how the per-device loss becomes the objective.

A plan answers four questions for the step builder (``compile.program``):

* ``prepare``: trace the step for these inputs into the graph IR and plan it (once per input signature);
* ``state_sharding`` / ``input_sharding``: where parameters, statistics, optimizer state and batches live;
* ``objective``: the scalar that is differentiated, the loss reported, and the updated non-trainable state.

``StandAlonePlan`` runs on one device. ``DataParallelPlan`` gives MindSpore's DATA_PARALLEL semantics exactly: each
device computes the user's loss on its own slice of the global batch (``jax.vmap`` over the device axis, sharded
over the mesh), and the gradient is that of the *sum* of the per-device losses, divided by the device count when
``gradients_mean=True``. The SEMI_AUTO/AUTO plan (``graphpar.parallel.planned``) differentiates the loss of the
global batch through the planned graph. In GRAPH_MODE every plan evaluates its traced graph with
``compile.interpret`` (so dumps can attribute collectives); PYNATIVE_MODE runs the Python network eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from graphpar import _context
from graphpar.compile.graph_trace import GraphCache, call_network, trace_network
from graphpar.compile.interpret import evaluate
from graphpar.compile.replica import replica_axis
from graphpar.compile.state import NetworkState
from graphpar.errors import DatasetError
from graphpar.ir.graph import Graph
from graphpar.parallel.mesh import make_mesh
from graphpar.parallel.strategy import MeshInfo

REPLICA_AXIS = "graphpar_replica"

__all__ = ["ExecutionPlan", "StandAlonePlan", "DataParallelPlan", "call_network", "REPLICA_AXIS"]


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
    pynative = False
    draws = 1  # per-device batches this process draws per step (dataset_strategy="data_parallel")
    first_rank = 0  # rank of this process's first device in the plan

    def __init__(self) -> None:
        self.pctx = _context.current_parallel()
        self.graphs = GraphCache()

    @property
    def n(self) -> int:
        return len(self.devices)

    @property
    def _last(self) -> Graph | None:
        return self.graphs.last

    # --- planning ----------------------------------------------------------------------------------------------
    def trace_avals(self, inputs: Sequence[Any], purpose: str) -> list[jax.ShapeDtypeStruct]:
        """The input avals the traced graph takes (the global batch by default)."""
        return list(inputs)

    def prepare(self, ns: NetworkState, inputs: Sequence[Any], purpose: str = "train") -> Graph | None:
        """Trace and plan for these (global-shaped) inputs before the step is jitted (GRAPH_MODE only)."""
        if self.pynative:
            return None
        return self.graphs.get_or_plan(ns, self.trace_avals(inputs, purpose), purpose, self._plan)

    def _plan(self, ns: NetworkState, avals: Sequence[Any], purpose: str) -> Graph:
        from graphpar.dump.writer import maybe_dump_begin
        from graphpar.parallel.passes.context import PlanContext
        from graphpar.parallel.pipeline import run_pipeline

        graph = self._trace(ns, avals, purpose)
        info = MeshInfo(("m0",), (1,))  # the graph runs whole on each device (replicas are outside it)
        graph = run_pipeline(graph, PlanContext(info, self.pctx.parallel_mode, self.pctx.search_mode))
        graph.meta.update(mesh=info, purpose=purpose, note=self.dump_note)
        maybe_dump_begin(graph, self)
        from graphpar.parallel.strategy_file import maybe_save

        maybe_save(graph, self.pctx, self.n, set(ns.param_names()), replicated=True)
        return graph

    dump_note = ""

    def _trace(self, ns: NetworkState, avals: Sequence[Any], purpose: str) -> Graph:
        return trace_network(ns, avals, purpose)

    def _run_graph(self, purpose: str, flat: list[Any], inputs: Sequence[Any]) -> list[Any]:
        return evaluate(self.graphs.for_inputs(purpose, inputs), flat, None)

    # --- placement ---------------------------------------------------------------------------------------------
    def state_sharding(self, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        raise NotImplementedError

    def input_sharding(self, index: int, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        raise NotImplementedError

    def check_batch(self, shapes: Sequence[tuple[int, ...]]) -> None:
        """Raise a clear error if a global batch cannot be split as this plan needs."""

    # --- the computation ---------------------------------------------------------------------------------------
    def _loss_and_state(self, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any]):
        if self.pynative:
            model = ns.merge(params, rest)
            return call_network(model, inputs), ns.split_after(model)
        flat = jax.tree.leaves(params) + jax.tree.leaves(rest) + list(inputs)
        loss, *new_rest = self._run_graph("train", flat, inputs)
        return loss, ns.rest.unflatten(new_rest)

    def objective(self, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any], sens: float):
        """``(objective, (reported_loss, new_rest))``."""
        loss, new_rest = self._loss_and_state(ns, params, rest, inputs)
        return _objective_of(loss, sens), (jnp.mean(jnp.asarray(loss, jnp.float32)), new_rest)

    def forward(self, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any]) -> Any:
        """The network's output on ``inputs`` (evaluation and prediction)."""
        if self.pynative:
            return call_network(ns.merge(params, rest), inputs)
        flat = jax.tree.leaves(params) + jax.tree.leaves(rest) + list(inputs)
        graph = self.graphs.for_inputs("forward", inputs)
        return jax.tree.unflatten(graph.meta["out_treedef"], evaluate(graph, flat, None))


class StandAlonePlan(ExecutionPlan):
    """Everything on one device."""

    name = "stand_alone"
    dump_note = "stand-alone: the whole graph runs on one device"

    def __init__(self, device: jax.Device, pynative: bool = False):
        super().__init__()
        self.devices = [device]
        self.pynative = pynative
        self._sharding = SingleDeviceSharding(device)
        from graphpar.compile.devices import all_devices

        self.first_rank = all_devices().index(device) if device in all_devices() else 0

    def state_sharding(self, shape):
        return self._sharding

    def input_sharding(self, index, shape):
        return self._sharding


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
        local = [i for i, d in enumerate(self.devices) if d.process_index == jax.process_index()]
        self.draws = self.replicas if len(self.devices) == 1 else len(local)
        self.first_rank = local[0] if local and len(self.devices) > 1 else 0
        if len(self.devices) > 1:
            self.mesh = make_mesh(self.devices)
            self._replicated = NamedSharding(self.mesh, PartitionSpec())
            self._batch_axes: tuple[str, ...] | None = tuple(self.mesh.axis_names)
            self._batch = NamedSharding(self.mesh, PartitionSpec(self._batch_axes))
        else:
            self._replicated = self._batch = SingleDeviceSharding(self.devices[0])
            self._batch_axes = None

    @property
    def dump_note(self) -> str:
        return (f"data parallel: each of the {self.replicas} devices runs this graph on its slice of the batch; "
                "gradients are reduced across devices")

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

    def _trace(self, ns, avals, purpose):
        if purpose != "train":
            return trace_network(ns, avals, purpose)
        # one replica's graph, traced with the replica axis bound so that collectives in construct see it
        with replica_axis(REPLICA_AXIS):
            return trace_network(ns, avals, purpose, axis_env=[(REPLICA_AXIS, self.replicas)])

    def trace_avals(self, inputs, purpose):
        if purpose != "train":
            return list(inputs)
        # the graph each replica runs: its slice of the batch
        return [jax.ShapeDtypeStruct((x.shape[0] // self.replicas,) + tuple(x.shape[1:]), x.dtype)
                if x.shape else x for x in inputs]

    def _split(self, x):
        return jnp.reshape(x, (self.replicas, x.shape[0] // self.replicas) + x.shape[1:])

    def objective(self, ns, params, rest, inputs, sens):
        def per_replica(local_inputs):
            loss, new_rest = self._loss_and_state(ns, params, rest, local_inputs)
            return jnp.asarray(loss), new_rest

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
        if self.pynative:
            return call_network(ns.merge(params, rest), inputs)
        # evaluation needs no per-replica semantics: the global graph with the batch split over the mesh
        flat = jax.tree.leaves(params) + jax.tree.leaves(rest) + list(inputs)
        graph = self.graphs.for_inputs("forward", inputs)
        return jax.tree.unflatten(graph.meta["out_treedef"], evaluate(graph, flat, None))
