"""MindSpore's STAND_ALONE manual parallel: a train step that runs once per rank, collectives inside ``construct``.

Under msrun each MindSpore process drives one device and trains the network it built, with its own Parameter
values: a network that calls ``ops.AllReduce`` / ``ops.AllGather`` in ``construct`` exchanges activations with the
other ranks (their gradients follow MindSpore's rules, ``communication.collectives``), and nothing else is
reduced: each rank's optimizer updates its own parameters from its own gradients, unless the network itself
reduces (MindSpore adds a gradient reduction only in DATA_PARALLEL and the auto-parallel modes).

:class:`PerRankTrainProgram` gives a ``TrainOneStepCell`` (``Model.train``) that meaning. Its step is the
train step of ``lowering.step`` (objective → ``value_and_grad`` → optax update, loss scaling included) traced
under the rank axis (``communication.rank_axis``) inside ``jax.shard_map`` over a 1-D mesh of every device of the
job, so the collectives lower to JAX collectives over the ranks. Every piece of state (trainable parameters, the
rest of the network state, the optimizer state) and every input is a global array of shape ``(n_ranks, *shape)``
split over the rank axis: each process supplies its own row (its Parameters' values, its batch) and takes its own
row of the results back into its Parameters and optimizer, so ``param.asnumpy()`` and the loss are this rank's.

Which jobs get it (``wants_per_rank_training``, decided where ``TrainOneStepCell`` asks for its program): parallel
mode STAND_ALONE and a network holding a collective op. It runs where each process of the job drives exactly one
device (msrun / ``graphpar launch --worker_num N``; on CPU ``--xla_force_host_platform_device_count=1``; a lone
process of one device is a job of one rank). A process driving several devices is refused by name: its ranks
would each need their own values of one Parameter, which a MindSpore script cannot hold; DATA_PARALLEL (one value
per Parameter, collectives over the devices) or one device per process is what works there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar.communication.devices import all_devices, local_ranks
from graphpar.communication.errors import CommunicationError
from graphpar.communication.rank_axis import replica_axis
from graphpar.compile.lowering.graph_trace import call_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.lowering.step import StepParts, optax_update, sink_loop, train_step
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.planned import Planned
from graphpar.compile.runtime.skeleton import Program
from graphpar.compile.runtime.spmd_call import RANK_AXIS
from graphpar.nn.cell import Cell
from graphpar.nn.grad_accumulation import unwrap_accumulation
from graphpar.nn.loss_scale import loss_scale_of, train_transformation
from graphpar.nn.runner import needs_spmd
from graphpar.ops.comm_ops import Collective


def wants_per_rank_training(network: Cell) -> bool:
    """Whether a train step of ``network`` runs once per rank: STAND_ALONE with a collective op in its tree."""
    return (_context.current_parallel().parallel_mode == ParallelMode.STAND_ALONE
            and needs_spmd(unwrap_accumulation(network)[0]))


class PerRankPlan(ExecutionPlan):
    """Every device of the job, each running the whole network as its own rank (``devices`` in rank order).

    What ``Model.train`` reads of a plan: this process feeds one batch per step (``draws``), its rank's
    (``first_rank``). The objective runs ``construct`` as written (no planned graph: the per-rank step is not
    planned, each rank holding whole tensors as in MindSpore's STAND_ALONE)."""

    name = "per_rank"
    dump_note = "stand-alone per rank: each rank runs the whole graph; collectives in construct cross ranks"

    def __init__(self, devices: Sequence[jax.Device]):
        super().__init__()
        self.devices = list(devices)
        self.mesh = Mesh(np.asarray(self.devices, dtype=object), (RANK_AXIS,))
        mine = local_ranks(self.devices)
        self.first_rank = mine[0] if mine else 0

    def _loss_and_state(self, planned: Any, ns: NetworkState, params: Any, rest: Any, inputs: Sequence[Any]):
        model = ns.merge(params, rest)
        return call_network(model, inputs), ns.split_after(model)


def _collectives(network: Cell) -> list[str]:
    """Attribute paths of the collective ops in ``network``'s tree (``_backbone.all_reduce``)."""
    return [f"{path}.{name}" if path else name for path, cell in network.cells_and_names()
            for name, value in vars(cell).items() if isinstance(value, Collective)]


def per_rank_plan(network: Cell) -> PerRankPlan:
    """The plan for per-rank training, refusing a process that drives more than one device (see the module
    docstring)."""
    devices = all_devices()
    mine = local_ranks(devices)
    if len(mine) != 1:
        ops = _collectives(network)
        raise CommunicationError(
            f"{type(network).__name__} ({', '.join(ops[:3])}{', ...' if len(ops) > 3 else ''}): "
            "parallel_mode=STAND_ALONE with collective ops in construct trains once per "
            f"rank, each rank with its own Parameter values, so each process must drive one device; this process "
            f"drives {len(mine)} (ranks {mine[0]}..{mine[-1]}). Start one process per device (msrun --worker_num "
            f"{len(devices)} --local_worker_num {len(devices)}, or graphpar launch --nproc {len(devices)} "
            "--devices-per-proc 1; on CPU XLA_FLAGS=--xla_force_host_platform_device_count=1), or use "
            "parallel_mode=DATA_PARALLEL (one value per Parameter, collectives over the devices)")
    return PerRankPlan(devices)


@dataclass(frozen=True)
class PerRankTrainSettings:
    """What the per-rank step reads of the settings, once per compile key: the plan (the job's devices)."""

    plan: PerRankPlan


def _rows(sharding: NamedSharding, values: Sequence[Any]) -> list[jax.Array]:
    """Global ``(n_ranks, *shape)`` arrays from this process's values (one row each, on its one device)."""
    device = next(iter(sharding.addressable_devices))
    out = []
    for v in values:
        local = jax.device_put(v, device)[None]
        out.append(jax.make_array_from_single_device_arrays((sharding.mesh.devices.size,) + local.shape[1:],
                                                            sharding, [local]))
    return out


def _own_rows(values: Sequence[jax.Array]) -> list[jax.Array]:
    """This process's row of each global per-rank array (on its device)."""
    return [v.addressable_data(0)[0] for v in values]


class PerRankTrainProgram(Program[PerRankTrainSettings]):
    """The train step of a ``TrainOneStepCell`` in STAND_ALONE manual parallel: one step per rank per call,
    one compiled program per (network structure, batch signature, sink length)."""

    def __init__(self, train_cell: Any):
        network, micro_size = unwrap_accumulation(train_cell.network)
        if micro_size > 1:
            raise CommunicationError(
                f"GradAccumulation(micro_size={micro_size}) around {type(network).__name__}: STAND_ALONE training "
                "with collective ops in construct runs once per rank and has no micro-batch loop; accumulate in "
                "the training loop, or use micro_size=1")
        super().__init__(f"{type(network).__name__} per-rank train step", network)
        self.train_cell = train_cell
        self.optimizer = train_cell.optimizer
        self.sens = train_cell.sens
        self.network.check_names()
        self.network.set_train(True)
        self._compiled: dict[tuple, Callable] = {}
        _ = self.settings  # refusals (a process of several devices) are named when the program is built

    def read_settings(self) -> PerRankTrainSettings:
        return PerRankTrainSettings(per_rank_plan(self.network))

    def trainable(self) -> Sequence[Any]:
        return self.optimizer.parameters

    @property
    def plan(self) -> PerRankPlan:
        return self.settings.plan

    # --- the step ----------------------------------------------------------------------------------------------
    def _parts(self, ns: NetworkState) -> StepParts:
        plan, sens = self.plan, self.sens
        no_graph: Planned | None = None  # the per-rank objective runs construct as written

        def objective(params, rest, inputs):
            return plan.objective(no_graph, ns, params, rest, inputs, sens)

        tx = train_transformation(self.train_cell, self.optimizer)
        return StepParts(objective=objective, update=optax_update(tx), loss_scale=loss_scale_of)

    def _build(self, ns: NetworkState, opt_tree: Any, stacked: bool) -> Callable:
        """``run(pvals, rvals, opt_leaves, inputs) -> (pvals, rvals, opt_leaves, loss)`` on per-rank global arrays:
        the step of ``lowering.step`` run once per rank under the rank axis."""
        step = train_step(self._parts(ns), ns)
        step = sink_loop(step) if stacked else step
        mesh = self.plan.mesh

        def per_rank(pvals, rvals, opt_leaves, inputs):
            first = [[v[0] for v in group] for group in (pvals, rvals, opt_leaves, inputs)]
            with replica_axis(RANK_AXIS, native_groups=True):
                p, r, o, loss = step(first[0], first[1], jax.tree.unflatten(opt_tree, first[2]), first[3])
            return ([v[None] for v in p], [v[None] for v in r], [v[None] for v in jax.tree.leaves(o)],
                    loss[None])

        split = PartitionSpec(RANK_AXIS)
        mapped = jax.shard_map(per_rank, mesh=mesh, in_specs=split, out_specs=split, check_vma=False)
        return jax.jit(mapped, donate_argnums=(0, 1, 2))

    def _program(self, ns: NetworkState, inputs: Sequence[Any], opt_state: Any, stacked: bool) -> Callable:
        opt_leaves, opt_tree = jax.tree.flatten(opt_state)
        key = (ns.structure, stacked, opt_tree, tuple((np.shape(x), str(x.dtype)) for x in inputs))
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = self._build(ns, opt_tree, stacked)
            self.orchestrator.cache.count("traces")
        return found

    def _opt_state(self, ns: NetworkState) -> Any:
        """This rank's optimizer state, created from its own Parameter values on first use."""
        if self.optimizer.opt_state is None:
            init = train_transformation(self.train_cell, self.optimizer).init
            self.optimizer.opt_state = init(dict(zip(ns.param_names(), ns.params.values())))
        return self.optimizer.opt_state

    # --- running -----------------------------------------------------------------------------------------------
    def run_step(self, inputs: Sequence[Any]) -> jax.Array:
        """One training step on this rank's batch; returns this rank's loss (a scalar)."""
        return self._run(inputs, stacked=False)

    def run_steps(self, stacked_inputs: Sequence[Any]) -> jax.Array:
        """``len(stacked_inputs[0])`` steps in one device call (sink mode); returns this rank's per-step losses."""
        return self._run(stacked_inputs, stacked=True)

    def _run(self, inputs: Sequence[Any], stacked: bool) -> jax.Array:
        ns = self.state
        opt_state = self._opt_state(ns)
        inputs = [x if isinstance(x, jax.Array) else np.asarray(x) for x in inputs]
        run = self._program(ns, inputs, opt_state, stacked)
        sharding = NamedSharding(self.plan.mesh, PartitionSpec(RANK_AXIS))
        opt_leaves, opt_tree = jax.tree.flatten(opt_state)
        args = [_rows(sharding, group) for group in (ns.params.values(), ns.rest.values(), opt_leaves, inputs)]
        p, r, o, loss = run(*args)
        ns.params.write(_own_rows(p))
        ns.rest.write(_own_rows(r))
        self.optimizer.opt_state = jax.tree.unflatten(opt_tree, _own_rows(o))
        return _own_rows([loss])[0]
