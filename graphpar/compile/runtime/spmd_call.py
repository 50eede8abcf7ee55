"""Running code once per rank: a top-level call of a Cell that holds collective ops, or any function.

MindSpore runs a script once per device, so ``net(x)`` with ``ops.AllGather`` inside gathers every device's ``x``.
graphpar drives several devices per process; :func:`run_spmd` gives the call the same meaning by running
``construct`` once per rank with ``jax.shard_map`` over a 1-D mesh of every device of the job (rank order), jitted
and cached per input signature. Which Cell calls run here is decided with the Cell, in ``nn.runner``
(``needs_spmd``: the Cell's tree holds a collective op). Training such a network in STAND_ALONE runs its step once
per rank too, with per-rank state (``runtime.per_rank_train``, on the same ``RANK_AXIS``).

Convention for the arguments (the data-parallel batch convention): each array argument with at least one dimension
is *this process's* data, its leading dimension split evenly over the process's local devices, so a process driving
``k`` devices passes ``k`` rows per row a MindSpore rank would pass. Scalars (0-d arrays) are given to every rank as
they are; other Python values are constants of the traced program.

Outputs come back as global arrays: an output that is the same on every rank (``varying.varying_outputs`` decides,
statically) once; any other the per-rank values concatenated along dimension 0 (0-d values become a vector with one
entry per rank). In a multi-process job every output is gathered onto every process, so ``print`` and
``np.asarray`` work everywhere.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graphpar.communication.devices import all_devices
from graphpar.communication.errors import CommunicationError
from graphpar.communication.rank_axis import replica_axis
from graphpar.communication.varying import varying_outputs
from graphpar.compile.runtime.skeleton import Program
from graphpar.compile.staging.cache import ProgramCache
from graphpar.nn.cell import Cell
from graphpar.nn.runner import needs_spmd as needs_spmd  # decided with the Cell; kept here for callers

RANK_AXIS = "graphpar_rank"
_SPLIT, _SCALAR, _STATIC = "split", "scalar", "static"


def _kind(leaf: Any) -> str:
    if isinstance(leaf, (jax.Array, np.ndarray)):
        return _SPLIT if np.ndim(leaf) else _SCALAR
    if isinstance(leaf, np.generic):
        return _SCALAR
    return _STATIC


def _mesh() -> Mesh:
    return Mesh(np.asarray(all_devices(), dtype=object), (RANK_AXIS,))


def _local_count(mesh: Mesh) -> int:
    return sum(d.process_index == jax.process_index() for d in mesh.devices.flat)


def _place(value: Any, sharding: NamedSharding) -> jax.Array:
    if isinstance(value, jax.Array) and value.sharding == sharding:
        return value
    if jax.process_count() > 1:
        return jax.make_array_from_process_local_data(sharding, np.asarray(value))
    return jax.device_put(value if isinstance(value, jax.Array) else np.asarray(value), sharding)


class PerRankProgram:
    """``fn(state, *args, **kwargs)`` compiled to run once per rank; one executable per input signature (each
    trace counted in ``cache`` when one is given)."""

    def __init__(self, fn: Callable[..., Any], name: str, cache: ProgramCache | None = None):
        self.fn = fn
        self.name = name
        self._cache = cache
        self._compiled: dict[tuple, Callable] = {}

    def __call__(self, state: Sequence[Any], args: tuple, kwargs: dict, mesh: Mesh | None = None) -> Any:
        mesh = mesh if mesh is not None else _mesh()
        leaves, treedef = jax.tree.flatten((args, kwargs))
        kinds = [_kind(leaf) for leaf in leaves]
        key = (treedef, tuple(k if k != _STATIC else ("static", repr(v)) for k, v in zip(kinds, leaves)),
               tuple((np.shape(v), str(v.dtype)) for v, k in zip(leaves, kinds) if k != _STATIC),
               tuple((np.shape(s), str(s.dtype)) for s in state), mesh.devices.size)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._build(mesh, state, leaves, kinds, treedef)
            self._compiled[key] = compiled
        return compiled(state, [v for v, k in zip(leaves, kinds) if k != _STATIC])

    def _build(self, mesh: Mesh, state: Sequence[Any], leaves: list, kinds: list[str], treedef) -> Callable:
        n, local = mesh.devices.size, _local_count(mesh)
        per_rank_avals = []
        for i, (leaf, kind) in enumerate(zip(leaves, kinds)):
            if kind == _STATIC:
                continue
            shape = tuple(np.shape(leaf))
            if kind == _SPLIT:
                if shape[0] % local:
                    raise CommunicationError(
                        f"{self.name}: argument {i} has shape {shape}; its first dimension is this process's data "
                        f"split over its {local} device(s), so it must be divisible by {local} (pass {local} rows "
                        f"for every row one MindSpore rank would get)")
                shape = (shape[0] // local,) + shape[1:]
            per_rank_avals.append(jax.ShapeDtypeStruct(shape, jnp.asarray(leaf).dtype if kind == _SCALAR
                                                       else leaf.dtype))
        state_avals = [jax.ShapeDtypeStruct(np.shape(s), s.dtype) for s in state]
        out_tree: list = []

        def per_rank(state_vals, dynamic):
            it = iter(dynamic)
            full = [leaf if kind == _STATIC else next(it) for leaf, kind in zip(leaves, kinds)]
            args, kwargs = jax.tree.unflatten(treedef, full)
            with replica_axis(RANK_AXIS, native_groups=True):
                out = self.fn(state_vals, *args, **kwargs)
            flat, tree = jax.tree.flatten(out)
            out_tree[:] = [tree]
            return [jnp.asarray(v) for v in flat]

        traced = jax.make_jaxpr(per_rank, axis_env=[(RANK_AXIS, n)])(state_avals, per_rank_avals)
        if self._cache is not None:
            self._cache.count("traces")
        dyn_kinds = [k for k in kinds if k != _STATIC]
        varying = varying_outputs(traced, [False] * len(state_avals) + [k == _SPLIT for k in dyn_kinds], RANK_AXIS)

        def body(state_vals, dynamic):
            outs = per_rank(state_vals, dynamic)
            return [o.reshape((1,)) if v and o.ndim == 0 else o for o, v in zip(outs, varying)]

        axis = PartitionSpec(RANK_AXIS)
        in_specs = ([PartitionSpec()] * len(state), [axis if k == _SPLIT else PartitionSpec() for k in dyn_kinds])
        out_specs = [axis if v else PartitionSpec() for v in varying]
        mapped = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
        replicated = NamedSharding(mesh, PartitionSpec())
        out_shardings = [replicated if (not v or jax.process_count() > 1) else NamedSharding(mesh, axis)
                         for v in varying]
        jitted = jax.jit(mapped, out_shardings=out_shardings)
        shardings = ([replicated] * len(state), [NamedSharding(mesh, axis) if k == _SPLIT else replicated
                                                  for k in dyn_kinds])

        def run(state_vals, dynamic):
            placed_state = [_place(v, s) for v, s in zip(state_vals, shardings[0])]
            placed = [_place(v, s) for v, s in zip(dynamic, shardings[1])]
            return jax.tree.unflatten(out_tree[0], jitted(placed_state, placed))

        return run


@dataclass(frozen=True)
class PerRankSettings:
    """What a per-rank call reads of the settings (once per compile key, ``runtime.skeleton``): the 1-D mesh of
    every device of the job, in rank order (``device_target`` picks the devices)."""

    mesh: Mesh


class CellPerRankProgram(Program[PerRankSettings]):
    """A Cell's top-level calls run once per rank: one :class:`PerRankProgram` per network structure (each Cell's
    ``training`` flag among it), on the network's state."""

    def __init__(self, cell: Cell):
        super().__init__(f"{type(cell).__name__} per-rank call", cell)
        self._calls: dict[Any, PerRankProgram] = {}

    def read_settings(self) -> PerRankSettings:
        return PerRankSettings(_mesh())

    def call(self, args: tuple, kwargs: dict) -> Any:
        ns = self.state
        program = self._calls.get(ns.structure)
        if program is None:
            def call(state_vals, *a, _ns=ns, **kw):
                model = _ns.merge(_ns.params.unflatten([]), _ns.rest.unflatten(state_vals))
                return model.construct(*a, **kw)

            program = self._calls[ns.structure] = PerRankProgram(call, f"{type(self.network).__name__} (per-rank "
                                                                       "call)", self.orchestrator.cache)
        return program(ns.rest.values(), args, kwargs, self.settings.mesh)


_programs: "weakref.WeakKeyDictionary[Cell, CellPerRankProgram]" = weakref.WeakKeyDictionary()


def run_spmd(cell: Cell, args: tuple, kwargs: dict) -> Any:
    """Run ``cell(*args, **kwargs)`` once per rank of the job (see the module docstring for the convention)."""
    program = _programs.get(cell)
    if program is None:
        program = _programs[cell] = CellPerRankProgram(cell)
    return program.call(args, kwargs)


_fn_programs: "weakref.WeakKeyDictionary[Callable, PerRankProgram]" = weakref.WeakKeyDictionary()


def run_per_rank(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` once per rank, with the same argument and output convention as a top-level
    Cell call (compiled once per ``fn`` and input signature). Collective ops and ``jax.grad`` through them work
    inside ``fn``."""
    program = _fn_programs.get(fn)
    if program is None:
        program = PerRankProgram(lambda state, *a, **kw: fn(*a, **kw), getattr(fn, "__name__", "function"))
        _fn_programs[fn] = program
    return program([], args, kwargs)
