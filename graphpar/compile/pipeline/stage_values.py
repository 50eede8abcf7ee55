"""Each stage's copy of the network's parameters and state between steps, and the sums of shared gradients.

The network holds one value per Parameter (what checkpoints and ``load_param_into_net`` see). A pipelined step
needs one per stage that uses it: a Parameter shared by several stages has a copy in each, and in a multi-process
job a process holds only its own stages' values. :class:`KeptValues` keeps every stage's copy from one step to the
next while the network still holds what the step wrote; once something else was assigned (a checkpoint load) the
stages take the new value, placed on their devices. What the network holds of a value is its first stage's copy, or
a placeholder where another process runs that stage (``processes.placeholder``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from jax.sharding import NamedSharding

from graphpar.compile.lowering.network_state import StateGroup
from graphpar.compile.pipeline.build import Built, Stage
from graphpar.compile.pipeline.processes import place_owned, placeholder

Where = Callable[[Stage], dict[int, NamedSharding]]  # a stage's values of one group: index -> sharding


def PARAMS(st: Stage) -> dict[int, NamedSharding]:  # noqa: N802 - a constant-like selector
    return st.param_sh


def REST(st: Stage) -> dict[int, NamedSharding]:  # noqa: N802 - a constant-like selector
    return st.rest_sh


class KeptValues:
    """The copies of one pipelined program's stages, per state group."""

    def __init__(self) -> None:
        self._kept: dict[Where, tuple[list[Any], dict[tuple[int, int], Any]]] = {}

    def take(self, stages: list[Stage], group: StateGroup, where: Where) -> dict[tuple[int, int], Any]:
        """``{(stage, index): value}`` of ``group`` on every stage this process runs."""
        current, kept = group.values(), self._kept.get(where)
        out: dict[tuple[int, int], Any] = {}
        for st in stages:
            if not st.owned:
                continue
            s, shardings = st.sg.stage, where(st)
            fresh = [i for i in shardings if kept is None or current[i] is not kept[0][i] or (s, i) not in kept[1]]
            for i, value in zip(fresh, place_owned([current[i] for i in fresh], [shardings[i] for i in fresh])):
                out[(s, i)] = value
            out.update({(s, i): kept[1][(s, i)] for i in shardings if i not in fresh})  # type: ignore[index]
        return out

    def write(self, stages: list[Stage], group: StateGroup, where: Where, values: dict[tuple[int, int], Any]) -> None:
        """Write each value's first stage's copy into ``group`` and keep every copy for the next step."""
        written = list(group.values())
        first: dict[int, Stage] = {}
        for st in stages:
            for i in where(st):
                first.setdefault(i, st)
        for i, st in first.items():
            written[i] = values[(st.sg.stage, i)] if st.owned else placeholder(
                np.shape(written[i]), written[i].dtype, where(st)[i])
        group.write(written)
        self._kept[where] = (group.values(), values)


def sum_shared(built: Built, grads: list[Any]) -> int:
    """Each shared Parameter's gradient summed over the stages using it, every stage's copy getting the sum (so
    the copies, updated alike, stay equal); in the same order in every process. Returns how many were summed."""
    for i, users in built.split.shared.items():
        copies, shardings = [], []
        for s in users:
            st = built.stages[s]
            copies.append(place_owned([grads[s][st.sg.params.index(i)]], [st.param_sh[i]])[0] if st.owned else None)
            shardings.append(st.param_sh[i])
        value = built.graph.values[built.graph.inputs[i]]
        summed = built.links.sum_copies(("shared", i), copies, shardings, value.shape, value.dtype)
        for s, g in zip(users, summed):
            if g is not None:
                grads[s][built.stages[s].sg.params.index(i)] = g
    return len(built.split.shared)
