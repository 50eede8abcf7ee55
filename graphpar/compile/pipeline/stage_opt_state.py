"""The optimizer's one state cut into per-stage states and put back together, by pytree path.

A pipelined step updates each stage's parameters in that stage's own program, on its own devices, so each stage
needs the optax state of its parameters only. optax states mirror the parameter dict: a leaf whose path holds a
parameter's name belongs to that parameter's stage; the other leaves (step counts) are shared, and every stage
keeps its own copy (they advance alike: one update per stage per step). The optimizer itself keeps one state, as
for any plan, so checkpoints and ``load_param_into_net`` see the same entries whatever the stage count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graphpar.compile.plans.layout import state_shardings
from graphpar.planner.state_paths import parameter_of
from graphpar.compile.pipeline.processes import local_value, own_copy, place_owned, placeholder


def split_state(whole: Any, tx: optax.GradientTransformation, stage_params: Sequence[dict[str, Any]],
                stage_shardings: Sequence[dict[str, NamedSharding]], meshes: Sequence[Mesh],
                owned: Sequence[bool]) -> list[Any]:
    """One state per stage (``tx.init`` of the stage's ``{name: parameter}``), its leaves taken from ``whole`` by
    path and placed on the stage's devices: beside their parameter when they mirror it, else replicated
    (placeholders for the stages this process does not ``own``)."""
    flat = dict(jax.tree_util.tree_flatten_with_path(whole)[0])
    states = []
    held: dict[frozenset, set[str]] = {}  # device group -> the parameters whose leaves it was given
    for params, shardings, mesh, mine in zip(stage_params, stage_shardings, meshes, owned):
        replicated = NamedSharding(mesh, PartitionSpec())
        names = held.setdefault(frozenset(mesh.devices.flat), set())
        again = bool(names & set(params))  # a chunk sharing a Parameter with an earlier chunk of its group
        names.update(params)
        template = jax.eval_shape(tx.init, params)
        placed = state_shardings(template, {n: (np.shape(v), shardings[n]) for n, v in params.items()},
                                 lambda shape, replicated=replicated: replicated)

        def place(path: Any, leaf: Any, sharding: NamedSharding, mine: bool = mine, again: bool = again) -> Any:
            if not mine:
                return placeholder(leaf.shape, leaf.dtype, sharding)
            value = flat.get(path)
            if value is None:  # a leaf the whole state lacks: its initial value
                value = np.zeros(leaf.shape, leaf.dtype)
            value = place_owned([value], [sharding])[0]
            return own_copy(value, sharding) if again else value  # each chunk's update donates its own

        states.append(jax.tree_util.tree_map_with_path(place, template, placed))
    return states


def join_state(template: Any, states: Sequence[Any], owner: dict[str, int], local: int = 0) -> Any:
    """The optimizer's one state (structure ``template``) from the stages' states; ``owner``: parameter name ->
    (first) stage. Shared leaves come from stage ``local`` (one this process runs)."""
    by_stage = [dict(jax.tree_util.tree_flatten_with_path(s)[0]) for s in states]

    def pick(path: Any, leaf: Any) -> Any:
        name = parameter_of(path, owner)
        if name is not None and path in by_stage[owner[name]]:
            return by_stage[owner[name]][path]
        shared = by_stage[local].get(path, leaf)
        if jax.process_count() > 1 and isinstance(shared, jax.Array):  # the same value on every process
            return local_value(shared)
        return shared

    return jax.tree_util.tree_map_with_path(pick, template)
