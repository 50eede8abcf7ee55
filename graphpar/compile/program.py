"""The compiled train step: forward, loss, gradients and the optax update as one XLA program.

``TrainProgram`` is built from a ``TrainOneStepCell`` when it first runs. It splits the network into pure state
(``compile.state``), asks the plan (``compile.choose``) where every array lives and what the objective is, and jits
one step function with those shardings for in- and outputs, donating the old state. Sink mode scans the same step
over a stack of batches in one device call. After each call the new values are written back into the network's
Parameters and the optimizer's state, so ``param.asnumpy()`` always shows the trained values.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from graphpar import _context
from graphpar._context import PYNATIVE_MODE
from graphpar.compile import accumulate
from graphpar.compile.choose import choose_plan
from graphpar.compile.opt_shard import OptimizerSharding
from graphpar.compile.plan import ExecutionPlan
from graphpar.compile.recompute import advise_cpu_scheduler
from graphpar.compile.state import NetworkState, structure_epoch
from graphpar.nn.grad_accumulation import unwrap_accumulation
from graphpar.parallel.optimizer_parallel import OptimizerParallelConfig


def _key_of(inputs: Sequence[Any]) -> tuple:
    return tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x).__name__))) for x in inputs)


def _stacked(sharding: jax.sharding.Sharding) -> jax.sharding.Sharding:
    """The sharding of a stack of per-step arrays (a new leading, unsplit dimension)."""
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec))
    return sharding


class TrainProgram:
    """One compiled train step for a ``TrainOneStepCell`` under the context in force when it was built."""

    def __init__(self, train_cell: Any):
        self.train_cell = train_cell
        # bigger models: GradAccumulation / grad_accumulation_step, and the parallel optimizer (see compile.accumulate,
        # compile.opt_shard)
        pctx = _context.current_parallel()
        self.network, self.micro_size = unwrap_accumulation(train_cell.network, pctx.grad_accumulation_step)
        self.opt_config = OptimizerParallelConfig.from_context(pctx)
        self._opt_sharding: OptimizerSharding | None = None
        self.optimizer = train_cell.optimizer
        self.sens = train_cell.sens
        self.network.check_names()
        self.network.set_train(True)
        self.pynative = _context.current().mode == PYNATIVE_MODE
        self.plan: ExecutionPlan = choose_plan(self.network)
        advise_cpu_scheduler(self.network, self.plan.devices[0].platform)
        self._ns: NetworkState | None = None
        self._in_flight: collections.deque = collections.deque()
        self._fast: tuple | None = None
        self._fresh: set[int] = set()  # jitted steps not yet run (their first call compiles)
        self._written: tuple[list, list] | None = None
        self._steps: dict[tuple, Any] = {}
        self._sinks: dict[tuple, Any] = {}
        self.compile_seconds = 0.0

    # --- state -------------------------------------------------------------------------------------------------
    @property
    def state(self) -> NetworkState:
        if self._ns is None or self._ns.epoch != structure_epoch():
            self._ns = NetworkState(self.network, self.optimizer.parameters)
            self._steps.clear()
            self._sinks.clear()
        return self._ns

    def _opt_state(self, ns: NetworkState) -> Any:
        if self.optimizer.opt_state is None:
            names = ns.param_names()
            params = dict(zip(names, ns.params.values()))
            state = self.optimizer.transformation().init(params)
            self.optimizer.opt_state = jax.device_put(state, self._opt_shardings(ns, state))
        return self.optimizer.opt_state

    def optimizer_sharding(self, ns: NetworkState) -> OptimizerSharding:
        """Storage (parallel optimizer) and compute shardings of the trainable parameters (after planning)."""
        compute = self._state_shardings(ns.params.values(), ns.param_names())
        cached = self._opt_sharding
        if cached is None or cached.compute != compute:
            cached = OptimizerSharding(self.opt_config, ns.param_names(), ns.params.values(), compute)
            self._opt_sharding = cached
        return cached

    def _state_shardings(self, values: Sequence[Any], names: Sequence[str] | None = None) -> list:
        if names is not None and hasattr(self.plan, "param_sharding"):
            return [self.plan.param_sharding(n, tuple(np.shape(v))) for n, v in zip(names, values)]
        return [self.plan.state_sharding(tuple(np.shape(v))) for v in values]

    def _opt_shardings(self, ns: NetworkState, opt_state: Any) -> Any:
        """Optimizer-state leaves that mirror a parameter (momentum, Adam moments) live where it lives."""
        names, values = ns.param_names(), ns.params.values()
        by_name = {n: (np.shape(v), s) for n, v, s in zip(names, values, self.optimizer_sharding(ns).storage)}

        def sharding(path, leaf):
            for entry in path:
                found = by_name.get(getattr(entry, "key", None))
                if found is not None and np.shape(leaf) == found[0]:
                    return found[1]
            return self.plan.state_sharding(tuple(np.shape(leaf)))

        return jax.tree_util.tree_map_with_path(sharding, opt_state)

    # --- the step function -------------------------------------------------------------------------------------
    def _step_fn(self, ns: NetworkState):
        plan, sens, names, micro = self.plan, self.sens, ns.param_names(), self.micro_size
        tx = self.optimizer.transformation()
        opt = self.optimizer_sharding(ns)

        def step(pvals, rvals, opt_state, inputs):
            if accumulate.uses_replica_gradients(plan, opt, micro):
                shardings = [plan.input_sharding(i, tuple(np.shape(x))) for i, x in enumerate(inputs)]
                (loss, new_rest), grads = accumulate.accumulated_value_and_grad(
                    plan, ns, opt, list(pvals), list(rvals), inputs, sens, micro, shardings)
            else:
                rest = ns.rest.unflatten(rvals)

                def objective(p):
                    return plan.objective(ns, ns.params.unflatten(p), rest, inputs, sens)

                (_, (loss, new_rest)), grads = opt.value_and_grad(objective)(list(pvals))
                new_rest = jax.tree.leaves(new_rest)
            gdict = dict(zip(names, grads))
            pdict = dict(zip(names, pvals))
            updates, opt_state = tx.update(gdict, opt_state, pdict)
            new = optax.apply_updates(pdict, updates)
            return [new[n] for n in names], new_rest, opt_state, loss

        return step

    def _shardings(self, ns: NetworkState, inputs: Sequence[Any], opt_state: Any):
        p_sh = self.optimizer_sharding(ns).storage
        r_sh = self._state_shardings(ns.rest.values(), ns.rest.names())
        o_sh = self._opt_shardings(ns, opt_state)
        i_sh = [self.plan.input_sharding(i, tuple(np.shape(x))) for i, x in enumerate(inputs)]
        loss_sh = self.plan.state_sharding(())
        return p_sh, r_sh, o_sh, i_sh, loss_sh

    def _compile(self, fn, ns: NetworkState, placed: Sequence[Any], opt_state: Any, stacked: bool):
        """AOT-compile ``fn`` for these arguments (GRAPH_MODE), placing the state where the plan wants it first."""
        per_step = [x[0] for x in placed] if stacked else placed
        p_sh, r_sh, o_sh, i_sh, loss_sh = self._shardings(ns, per_step, opt_state)
        if stacked:
            i_sh, loss_sh = [_stacked(s) for s in i_sh], _stacked(loss_sh)
        self._place_state(ns, p_sh, r_sh, o_sh)
        jitted = jax.jit(fn, in_shardings=(p_sh, r_sh, o_sh, i_sh), out_shardings=(p_sh, r_sh, o_sh, loss_sh),
                         donate_argnums=(0, 1, 2))
        if not _context.current().save_graphs:
            # compiled on its first call; jit's C++ dispatch path is the fastest way to run it every step
            self._fresh.add(id(jitted))
            return jitted
        started = time.perf_counter()
        compiled = jitted.lower(ns.params.values(), ns.rest.values(), self.optimizer.opt_state, placed).compile()
        self.compile_seconds += time.perf_counter() - started
        from graphpar.dump.writer import maybe_dump_execute

        maybe_dump_execute(getattr(self.plan, "_last", None), self.plan, compiled.as_text())
        return compiled

    def _place_state(self, ns: NetworkState, p_sh, r_sh, o_sh) -> None:
        """Move parameters, state and optimizer state onto their planned shardings (once, before compiling)."""
        ns.params.write([_ensure(v, s) for v, s in zip(ns.params.values(), p_sh)])
        ns.rest.write([_ensure(v, s) for v, s in zip(ns.rest.values(), r_sh)])
        self.optimizer.opt_state = jax.tree.map(_ensure, self.optimizer.opt_state, o_sh)

    def _compiled_step(self, ns: NetworkState, placed: Sequence[Any], opt_state: Any):
        key = _key_of(placed)
        fn = self._steps.get(key)
        if fn is None:
            step = self._step_fn(ns)
            fn = step if self.pynative else self._compile(step, ns, placed, opt_state, stacked=False)
            self._steps[key] = fn
        return fn

    def _compiled_sink(self, ns: NetworkState, stacked: Sequence[Any], opt_state: Any):
        key = _key_of(stacked)
        fn = self._sinks.get(key)
        if fn is None:
            step = self._step_fn(ns)

            def sink(pvals, rvals, opt_state, stacked_inputs):
                def body(carry, inputs):
                    p, r, o, loss = step(*carry, inputs)
                    return (p, r, o), loss

                (p, r, o), losses = jax.lax.scan(body, (pvals, rvals, opt_state), list(stacked_inputs))
                return p, r, o, losses

            fn = sink if self.pynative else self._compile(sink, ns, stacked, opt_state, stacked=True)
            self._sinks[key] = fn
        return fn

    # --- running -----------------------------------------------------------------------------------------------
    def place_inputs(self, inputs: Sequence[Any], stacked: bool = False) -> list[jax.Array]:
        """Put global-batch inputs (numpy or jax) where the plan wants them (planning first if needed)."""
        from graphpar.compile.global_batch import global_shape

        self._prepare(self.state, inputs, stacked)
        out = []
        shapes = [tuple(np.shape(x))[1:] if stacked else tuple(np.shape(x)) for x in inputs]
        if jax.process_count() > 1:  # process-local rows: check the global batch they make
            shapes = [global_shape(s, self.plan.input_sharding(i, s)) for i, s in enumerate(shapes)]
        self.plan.check_batch(shapes)
        if self.micro_size > 1:
            accumulate.check_batch(shapes, self.micro_size, [accumulate.dim0_split(self.plan.input_sharding(i, s))
                                                             for i, s in enumerate(shapes)])
        for i, (x, shape) in enumerate(zip(inputs, shapes)):
            sharding = self.plan.input_sharding(i, shape)
            if stacked:
                sharding = _stacked(sharding)
            if isinstance(x, jax.Array) and x.sharding == sharding:
                out.append(x)
            else:
                out.append(_put(x, sharding))
        return out

    def _prepare(self, ns: NetworkState, inputs: Sequence[Any], stacked: bool) -> None:
        per_step = [np.asarray(x[0]) if stacked and not isinstance(x, jax.Array) else (x[0] if stacked else x)
                    for x in inputs]
        self.plan.prepare(ns, self._trace_avals([_global_aval(x) for x in per_step]), "train")

    def _trace_avals(self, avals: list[jax.ShapeDtypeStruct]) -> list[jax.ShapeDtypeStruct]:
        """What the plan traces: the step's inputs, or one micro-batch of them under gradient accumulation."""
        if self.micro_size == 1:
            return avals
        accumulate.check_batch([tuple(a.shape) for a in avals], self.micro_size, [1] * len(avals))
        return accumulate.micro_avals(avals, self.micro_size)

    def _run(self, fn_getter, inputs: Sequence[Any], stacked: bool) -> jax.Array:
        ns = self.state
        # Fast path: the same input signature as the last step, inputs already placed (a training loop).
        fast = self._fast
        if (fast is not None and fast[0] is ns and fast[1] == stacked and len(inputs) == len(fast[3])
                and all(isinstance(x, jax.Array) and x.shape == s and x.dtype == d and x.sharding == sh
                        for x, (s, d, sh) in zip(inputs, fast[3]))):
            fn, placed = fast[2], list(inputs)
        else:
            self._prepare(ns, inputs, stacked)
            self._opt_state(ns)
            placed = self.place_inputs(inputs, stacked)
            fn = fn_getter(ns, placed, self.optimizer.opt_state)
            self._fast = (ns, stacked, fn, [(x.shape, x.dtype, x.sharding) for x in placed])
        pvals, rvals = ns.params.values(), ns.rest.values()
        if not self.pynative and not self._unchanged(pvals, rvals):
            # a value was replaced since our last step (set_data, a checkpoint load, another program's layout):
            # put everything back where this program's compiled step expects it
            p_sh, r_sh, o_sh, _, _ = self._shardings(ns, placed, self.optimizer.opt_state)
            self._place_state(ns, p_sh, r_sh, o_sh)
            pvals, rvals = ns.params.values(), ns.rest.values()
        box = self.optimizer._box
        if self._fresh and id(fn) in self._fresh:
            self._fresh.discard(id(fn))
            started = time.perf_counter()
            pvals, rvals, box.state, loss = fn(pvals, rvals, box.state, placed)
            jax.block_until_ready(loss)
            self.compile_seconds += time.perf_counter() - started
        else:
            pvals, rvals, box.state, loss = fn(pvals, rvals, box.state, placed)
        self._limit_in_flight(loss)
        ns.params.write(pvals)
        ns.rest.write(rvals)
        self._written = (pvals, rvals)
        return loss

    def _unchanged(self, pvals: list, rvals: list) -> bool:
        written = self._written
        if written is None:
            return True  # the first call: _compile placed the state
        return (len(pvals) == len(written[0]) and all(a is b for a, b in zip(pvals, written[0]))
                and all(a is b for a, b in zip(rvals, written[1])))

    MAX_IN_FLIGHT = 2

    def _limit_in_flight(self, loss: Any) -> None:
        """Let at most ``MAX_IN_FLIGHT`` steps be queued on the devices. Steps are dispatched asynchronously; XLA's
        CPU backend deadlocks in its collective rendezvous when many multi-device programs are queued on few
        cores (seen with 8 simulated devices on 2 cores, in plain JAX too), and a queue of two keeps the devices
        as busy as a longer one."""
        if self.pynative or not isinstance(loss, jax.Array):
            return
        self._in_flight.append(loss)
        while len(self._in_flight) > self.MAX_IN_FLIGHT:
            self._in_flight.popleft().block_until_ready()

    def run_step(self, inputs: Sequence[Any]) -> jax.Array:
        """One training step on a global batch; returns the loss (a scalar jax.Array)."""
        return self._run(self._compiled_step, inputs, stacked=False)

    def run_steps(self, stacked_inputs: Sequence[Any]) -> jax.Array:
        """``len(stacked_inputs[0])`` steps in one device call (sink mode); returns the per-step losses."""
        return self._run(self._compiled_sink, stacked_inputs, stacked=True)

    def plan_graph(self, inputs: Sequence[Any]) -> Any:
        """The planned graph of the train step for ``inputs`` (SEMI/AUTO plans; None for the others)."""
        ns = self.state
        return self.plan.prepare(ns, self._trace_avals([_global_aval(x) for x in inputs]), "train")

    def lower_step(self, inputs: Sequence[Any]) -> Any:
        """The ``jax.stages.Lowered`` train step for ``inputs`` (used by dumps and benchmarks)."""
        ns = self.state
        self._prepare(ns, inputs, False)
        opt_state = self._opt_state(ns)
        placed = self.place_inputs(inputs)
        p_sh, r_sh, o_sh, i_sh, loss_sh = self._shardings(ns, placed, opt_state)
        fn = jax.jit(self._step_fn(ns), in_shardings=(p_sh, r_sh, o_sh, i_sh),
                     out_shardings=(p_sh, r_sh, o_sh, loss_sh))
        return fn.lower(ns.params.values(), ns.rest.values(), opt_state, placed)


def _global_aval(x: Any) -> jax.ShapeDtypeStruct:
    """The global shape of a process-local batch input (rows of every process stacked on dimension 0)."""
    shape = tuple(np.shape(x))
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if jax.process_count() > 1 and shape and not isinstance(x, jax.Array):
        from graphpar import _context

        if not _context.current_parallel().full_batch:
            shape = (shape[0] * jax.process_count(),) + shape[1:]
    return jax.ShapeDtypeStruct(shape, dtype)


def _ensure(x: Any, sharding: jax.sharding.Sharding) -> Any:
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    if jax.process_count() > 1 and (not isinstance(x, jax.Array) or x.is_fully_addressable):
        from graphpar.compile.global_batch import from_process_zero

        return from_process_zero(np.asarray(x), sharding)
    return jax.device_put(x, sharding)


def _put(x: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    if jax.process_count() > 1 and isinstance(sharding, NamedSharding) and not isinstance(x, jax.Array):
        from graphpar.compile.global_batch import make_global

        return make_global(np.asarray(x), sharding)
    if isinstance(sharding, SingleDeviceSharding) or not isinstance(x, jax.Array):
        return jax.device_put(np.asarray(x) if not isinstance(x, jax.Array) else x, sharding)
    return jax.device_put(x, sharding)


def as_loss_value(loss: Any) -> float:
    return float(jnp.mean(loss))
