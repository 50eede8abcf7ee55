"""Placing a program's arguments: the global aval of a process-local batch input, and the moves onto a sharding.

Every program (train step, forward call, pipelined step) receives numpy or jax arrays and runs on global arrays
in its plan's shardings; these are the few rules for getting there, shared rather than re-written per program.
In a multi-process job a process-local batch is one process's rows of the global batch (unless the settings load
the full batch on every process), and a non-array value is the same on every process (taken from process 0). A
deferred parameter (made inside ``no_init_parameters()``) is drawn where it lives, all of a program's in one jitted
initializer (:func:`born_in_place`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from graphpar.common.deferred import Deferred, born
from graphpar.compile.plans.global_batch import from_process_zero, global_shape, make_global


def is_process_local(x: Any) -> bool:
    """Whether a batch input of a multi-process job is this process's part of the global batch: a host value, or a
    ``Tensor`` (a ``jax.Array``) on this process's devices, as each MindSpore rank's Tensor is its own batch (a
    custom loop over ``create_tuple_iterator()``); only an array spanning the processes is global already."""
    return not isinstance(x, jax.Array) or x.is_fully_addressable


def global_aval(x: Any, stacked: bool = False, index: int | None = None) -> jax.ShapeDtypeStruct:
    """The global shape of a process-local batch input (rows of every process stacked on dimension 0, or, for
    input ``index`` of a ``dataset_strategy`` tuple, the blocks it splits); of one step's batch when ``x`` is a
    stack of batches."""
    shape = tuple(np.shape(x))[1:] if stacked else tuple(np.shape(x))
    dtype = x.dtype if isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)) else np.asarray(x).dtype
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if jax.process_count() > 1 and is_process_local(x):
        shape = global_shape(shape, index)
    return jax.ShapeDtypeStruct(shape, dtype)


def ensure_placed(x: Any, sharding: jax.sharding.Sharding) -> Any:
    """A state value (parameter, optimizer leaf) in ``sharding``: itself when it is there already; in a
    multi-process job a host value is the same on every process, so process 0's copy is spread."""
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    if isinstance(x, Deferred):
        return born([x], [sharding])[0][0]
    if jax.process_count() > 1 and (not isinstance(x, jax.Array) or x.is_fully_addressable):
        return from_process_zero(np.asarray(x), sharding)
    return jax.device_put(_source(x, sharding), sharding)


def _source(x: Any, sharding: jax.sharding.Sharding) -> Any:
    """What ``jax.device_put`` moves for ``x`` onto ``sharding`` in one process: ``x`` itself, or a host copy of a
    one-device array headed for a split sharding. JAX splits such an array with a jitted ``_multi_slice``,
    compiled once per shape (seven compiles, 0.3 s of the GPT bench model's 1.5 s first step); from the host, each
    device's block is copied out of a host copy, with no program (a copy: on CPU, device_put of a host view could
    alias the old array's buffer, which the step then donates). An eagerly made parameter lives on one device."""
    if isinstance(x, jax.Array) and len(x.sharding.device_set) == 1 and not _whole_on_each(sharding):
        return np.array(x)
    return x


def _whole_on_each(sharding: jax.sharding.Sharding) -> bool:
    """Whether every device of ``sharding`` holds the whole array (a copy needs no slicing)."""
    return sharding.is_fully_replicated or len(sharding.device_set) == 1


def born_in_place(values: Sequence[Any], shardings: Sequence[jax.sharding.Sharding]) -> list[Any]:
    """``values`` with every deferred one drawn in its sharding, all in one jitted program (each device draws its
    own block, with the values an eager draw gives for the same seed); the others are returned untouched."""
    values = list(values)
    pending = [i for i, v in enumerate(values) if isinstance(v, Deferred)]
    if pending:
        arrays, _ = born([values[i] for i in pending], [shardings[i] for i in pending])
        for i, array in zip(pending, arrays):
            values[i] = array
    return values


def place_state(values: Sequence[Any], shardings: Sequence[jax.sharding.Sharding]) -> list[Any]:
    """State values (parameters, other state) in ``shardings``: deferred ones drawn there (:func:`born_in_place`),
    the others moved as :func:`ensure_placed` moves one, in one batched ``jax.device_put`` (JAX's per-call work
    once, not per value: a third of the placement time of the GPT bench model's 132 parameters)."""
    drawn = born_in_place(values, shardings)
    seen: set[int] = set()
    out = list(drawn)
    moving: list[int] = []
    for i, (value, old, sharding) in enumerate(zip(drawn, values, shardings)):
        if isinstance(old, Deferred):
            continue
        if isinstance(value, jax.Array) and id(value) in seen:
            # one Tensor held by several Cells (a mask every block stores) is one array at several places of the
            # state, which the step donates: XLA refuses one buffer donated twice, so each further place gets its
            # own copy, made where the array is and then placed (JAX's device_put onto a replicated sharding
            # reuses the source's buffer on its device even with may_alias=False, as the first place may too)
            value = out[i] = jax.device_put(value, value.sharding, may_alias=False)
        else:
            seen.add(id(value))
        if isinstance(value, jax.Array) and value.sharding == sharding:
            continue
        if jax.process_count() > 1:
            out[i] = ensure_placed(value, sharding)
        else:
            moving.append(i)
    if moving:
        placed = jax.device_put([_source(out[i], shardings[i]) for i in moving], [shardings[i] for i in moving])
        for i, array in zip(moving, placed):
            out[i] = array
    return out


def stacked_sharding(sharding: jax.sharding.Sharding) -> jax.sharding.Sharding:
    """The sharding of a stack of per-step arrays (a new leading, unsplit dimension: a sink loop's batches)."""
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec))
    return sharding


def put_batch(x: Any, sharding: jax.sharding.Sharding, shape: tuple[int, ...] | None = None) -> jax.Array:
    """A batch input in ``sharding``; in a multi-process job a host value is this process's part of the global
    batch of ``shape`` (by default its rows)."""
    if jax.process_count() > 1 and isinstance(sharding, NamedSharding) and is_process_local(x):
        return make_global(np.asarray(x), sharding, shape)
    if isinstance(sharding, SingleDeviceSharding) or not isinstance(x, jax.Array):
        return jax.device_put(np.asarray(x) if not isinstance(x, jax.Array) else x, sharding)
    return jax.device_put(x, sharding)


# primitives whose result is a function of their operands' values alone, evaluated on the host by numpy
_HOST_RULES = {
    "broadcast_in_dim": lambda x, shape, broadcast_dimensions, **_: np.broadcast_to(
        np.reshape(x, [x.shape[broadcast_dimensions.index(d)] if d in broadcast_dimensions else 1
                       for d in range(len(shape))]), shape),
    "convert_element_type": lambda x, new_dtype, **_: np.asarray(x, new_dtype),
    "reshape": lambda x, new_sizes, **_: np.reshape(x, new_sizes),
    "copy": lambda x, **_: x,
    "copy_p": lambda x, **_: x,
}


def host_constants(closed: Any) -> list[np.ndarray] | None:
    """The outputs of ``closed`` (a ``ClosedJaxpr``) as numpy values when none depends on its inputs and every
    equation they come from is one of :data:`_HOST_RULES` (or a nested ``jit`` of them), else None. An optimizer's
    ``init`` is such a program (zeros like each parameter, a step count, a loss scale): its state is then made on
    the host and copied to its shardings, where a jitted ``init`` was one more XLA compile per program (0.1 s of a
    first step; more than the step's own run on a small model)."""
    def run(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        env = {v: np.asarray(c) for v, c in zip(jaxpr.constvars, consts)}
        env.update({v: a for v, a in zip(jaxpr.invars, args) if a is not None})

        def read(a: Any) -> Any:
            return np.asarray(a.val) if isinstance(a, jcore.Literal) else env.get(a)

        for eqn in jaxpr.eqns:
            ins = [read(a) for a in eqn.invars]
            if any(x is None for x in ins):
                continue  # depends on an input: its outputs stay unknown
            name = eqn.primitive.name
            if name in ("pjit", "jit", "closed_call"):
                inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
                outs = run(inner.jaxpr, inner.consts, ins)
            elif name in _HOST_RULES and len(ins) == 1:
                outs = [_HOST_RULES[name](ins[0], **eqn.params)]
            else:
                continue
            env.update({v: x for v, x in zip(eqn.outvars, outs) if x is not None})
        return [read(a) for a in jaxpr.outvars]

    outs = run(closed.jaxpr, closed.consts, [None] * len(closed.jaxpr.invars))
    if any(x is None for x in outs):
        return None
    return [np.asarray(x, dtype=v.aval.dtype) for x, v in zip(outs, closed.jaxpr.outvars)]


def put_constant(value: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """A host constant in ``sharding`` with no program: each of this process's devices gets its own block, copied
    (a block of a broadcast view must not alias a buffer the step donates); the same on every process of a job."""
    return jax.make_array_from_callback(value.shape, sharding, lambda index: np.array(value[index]))


def initial_state(init: Any, params: Any, closed: Any, shapes: Any, shardings: Any) -> Any:
    """``init(params)`` (an optimizer's state) in ``shardings``: from the host when its program ``closed`` (traced
    with result shapes ``shapes``) only makes constants (:func:`host_constants`), else by one jitted ``init``."""
    values = host_constants(closed)
    if values is None:
        return jax.jit(init, out_shardings=shardings)(params)
    placed = [put_constant(v, s) for v, s in zip(values, jax.tree.leaves(shardings))]
    return jax.tree.unflatten(jax.tree.structure(shapes), placed)
