"""MindSpore's STAND_ALONE manual parallel beyond ``Model.train``: ``Model.eval``, ``Model.predict`` and ``ms.jit``
functions over a network with collectives in ``construct``, run once per rank.

Under msrun each MindSpore process drives one device, holds its own Parameter values (a manual tensor-parallel
script builds each rank's slice), feeds its own data and reads its own results; the collectives in ``construct``
exchange values with the other processes. ``runtime.per_rank_train`` gives ``Model.train`` that meaning; here the
same for the rest of a script:

* :class:`PerRankRun` runs a function once per rank: ``jax.shard_map`` over the 1-D mesh of every device of the
  job (rank order, ``per_rank_train.per_rank_plan``, which refuses by name a process driving several devices), under
  the rank axis so the collectives lower to JAX collectives across the processes. The Variables the function reaches
  and the optimizers' states are lent to the trace (``objective.lent``) and are explicit inputs and outputs: each is
  a ``(n_ranks, *shape)`` global array of which this process gives and takes back its own row, as are the
  function's array arguments and its results. What the function writes (an optimizer's update, BatchNorm
  statistics) is written back to this process's objects. One executable per input signature and state structure.
* :func:`forward_program` is the program ``Model.eval`` / ``Model.predict`` run: a ``PerRankRun`` of the network in
  STAND_ALONE when its tree holds a collective op, else the planned forward (``runtime.forward``). Its ``plan`` is the
  per-rank plan, so ``Model.eval`` feeds each process one batch per step, its own, as ``Model.train`` does.
* :func:`wants_per_rank_function` decides it for a ``jit`` function (``functional.jit``): STAND_ALONE and a Cell it
  reaches holding a collective op. Such a function is not captured and planned (a plan splits one value of each
  Parameter over the devices, where each rank here holds its own): it runs as written once per rank, a gradient
  in it taken where it is called (``ops.composite``'s own ``value_and_grad``), an optimizer's call updating the
  rank's own Parameters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar.compile.functional.discover import reachable_state
from graphpar.compile.functional.objective import lent, lent_optimizer_state, read, variables_of
from graphpar.compile.lowering.graph_trace import call_network
from graphpar.compile.runtime.forward import ForwardProgram, program_for
from graphpar.compile.runtime.per_rank_train import PerRankPlan, per_rank_plan
from graphpar.compile.runtime.spmd_call import RANK_AXIS
from graphpar.communication.rank_axis import replica_axis
from graphpar.ir.control_flow import for_trace
from graphpar.nn.cell import Cell
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.nn.runner import needs_spmd
from graphpar.ops.composite import Differentiation


def _per_rank_mode() -> bool:
    return _context.current_parallel().parallel_mode == ParallelMode.STAND_ALONE


def _array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def _rows(sharding: NamedSharding, values: Sequence[Any]) -> list[jax.Array]:
    """Global ``(n_ranks, *shape)`` arrays from this process's values (one row each, on its one device)."""
    device = next(iter(sharding.addressable_devices))
    out = []
    for v in values:
        local = jax.device_put(jnp.asarray(v), device)[None]
        out.append(jax.make_array_from_single_device_arrays((sharding.mesh.devices.size,) + local.shape[1:],
                                                            sharding, [local]))
    return out


def _own_rows(values: Sequence[jax.Array]) -> list[jax.Array]:
    """This process's row of each global per-rank array."""
    return [v.addressable_data(0)[0] for v in values]


class PerRankRun:
    """``fn(*args)`` once per rank with ``variables`` and the ``optimizers``' states lent to it (see the module
    docstring); ``plan`` gives the mesh of the job's ranks."""

    def __init__(self, fn: Callable[..., Any], variables: Sequence[nnx.Variable], optimizers: Sequence[Optimizer],
                 plan: PerRankPlan, bindings: Sequence[tuple[Any, Any, Any]] = ()):
        self.fn, self.variables, self.optimizers, self.plan = fn, list(variables), list(optimizers), plan
        self.bindings = tuple(bindings)  # the names resolved to find the state (a jit function's: bindings_hold)
        self._compiled: dict[tuple, tuple[Callable, list]] = {}

    def __call__(self, *args: Any) -> Any:
        for opt in self.optimizers:  # this rank's state, made from its own Parameters on first use
            opt.init_state({p.name: p.get_value() for p in opt.parameters})
        states = [opt._box.state for opt in self.optimizers]
        leaves, treedef = jax.tree.flatten(args)
        arrays = [_array(x) for x in leaves]
        values, (state_leaves, state_tree) = read(self.variables), jax.tree.flatten(states)
        dynamic = [x for x, a in zip(leaves, arrays) if a]
        key = (treedef, state_tree, tuple(repr(x) if not a else (np.shape(x), str(jnp.result_type(x)))
                                          for x, a in zip(leaves, arrays)),
               tuple((np.shape(v), str(jnp.result_type(v))) for v in values + state_leaves))
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = self._build(leaves, arrays, treedef, state_tree)
        run, out_tree = found
        sharding = NamedSharding(self.plan.mesh, PartitionSpec(RANK_AXIS))
        new_values, new_states, outs = run(*(_rows(sharding, group) for group in (values, state_leaves, dynamic)))
        for var, value in zip(self.variables, _own_rows(new_values)):
            object.__setattr__(var, "_raw_value", value)
        for opt, state in zip(self.optimizers, jax.tree.unflatten(state_tree, _own_rows(new_states))):
            opt._box.state = state
        return jax.tree.unflatten(out_tree[0], _own_rows(outs))

    def _build(self, leaves: list, arrays: list[bool], treedef: Any, state_tree: Any) -> tuple[Callable, list]:
        out_tree: list = []
        variables, optimizers, fn = self.variables, self.optimizers, self.fn

        def per_rank(values, state_leaves, dynamic):
            it = iter(x[0] for x in dynamic)
            args = jax.tree.unflatten(treedef, [next(it) if a else x for x, a in zip(leaves, arrays)])
            states = jax.tree.unflatten(state_tree, [s[0] for s in state_leaves])
            with contextlib.ExitStack() as stack:
                stack.enter_context(replica_axis(RANK_AXIS, native_groups=True))
                stack.enter_context(lent(variables, [v[0] for v in values]))
                stack.enter_context(lent_optimizer_state(optimizers, states))
                out = fn(*args)
                new_values = read(variables)
                new_states = jax.tree.leaves([opt._box.state for opt in optimizers])
            flat, tree = jax.tree.flatten(out)
            out_tree[:] = [tree]
            return ([jnp.asarray(v)[None] for v in new_values], [jnp.asarray(s)[None] for s in new_states],
                    [jnp.asarray(o)[None] for o in flat])

        split = PartitionSpec(RANK_AXIS)
        mapped = jax.shard_map(per_rank, mesh=self.plan.mesh, in_specs=split, out_specs=split, check_vma=False)
        return jax.jit(mapped, donate_argnums=(0, 1)), out_tree


class PerRankForward:
    """``Model.eval`` / ``Model.predict`` of a network with collectives in STAND_ALONE: its ``construct`` once per
    rank on this process's batch and Parameters; the outputs are this rank's."""

    def __init__(self, cell: Cell):
        self.network = cell
        self.plan = per_rank_plan(cell)
        self._run = PerRankRun(lambda *inputs: call_network(cell, inputs), variables_of([cell]), [], self.plan)

    def __call__(self, *inputs: Any) -> Any:
        return self._run(*inputs)


def forward_program(cell: Cell) -> ForwardProgram | PerRankForward:
    """What ``Model.eval`` / ``Model.predict`` run for ``cell`` (see the module docstring)."""
    return PerRankForward(cell) if _per_rank_mode() and needs_spmd(cell) else program_for(cell)


def _reached(fn: Callable[..., Any]) -> tuple[list[Cell], list[nnx.Variable], list]:
    """``discover.reachable_state`` of ``fn`` and of the functions its gradient functions differentiate (a
    ``value_and_grad(forward_fn, ...)`` holds ``forward_fn``, and through it the network, in its ``Differentiation``)."""
    roots: list[Any] = [fn]
    while True:
        cells, loose, bindings = reachable_state(*roots)
        more = [b[2].fn for b in bindings if isinstance(b[2], Differentiation) and b[2].fn not in roots]
        if not more:
            return cells, loose, bindings
        roots += more


def wants_per_rank_function(fn: Callable[..., Any]) -> bool:
    """Whether a ``jit`` function runs once per rank: STAND_ALONE, and a Cell it reaches holds a collective op."""
    return _per_rank_mode() and any(needs_spmd(cell) for cell in _reached(fn)[0])


def per_rank_function(fn: Callable[..., Any]) -> PerRankRun:
    """``fn`` (a ``jit`` function) run once per rank with every Variable and optimizer state it reaches."""
    cells, loose, bindings = _reached(fn)
    optimizers = [c for c in cells if isinstance(c, Optimizer)]
    plan = per_rank_plan(next(c for c in cells if needs_spmd(c)))
    return PerRankRun(for_trace(fn), variables_of(cells, loose), optimizers, plan, bindings)
