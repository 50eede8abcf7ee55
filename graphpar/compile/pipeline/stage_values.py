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

import jax
import numpy as np
from jax.sharding import NamedSharding

from graphpar.compile.lowering.network_state import StateGroup
from graphpar.compile.pipeline.build import Built, Stage
from graphpar.compile.pipeline.processes import own_copy, place_owned, placeholder

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
        placed: set[tuple[frozenset, int]] = set()  # (device group, index) of the fresh values placed so far
        for st in stages:
            if not st.owned:
                continue
            s, shardings = st.sg.stage, where(st)
            fresh = [i for i in shardings if kept is None or current[i] is not kept[0][i] or (s, i) not in kept[1]]
            for i, value in zip(fresh, place_owned([current[i] for i in fresh], [shardings[i] for i in fresh])):
                group = (frozenset(shardings[i].device_set), i)  # a second chunk of one group: its own copy
                out[(s, i)] = own_copy(value, shardings[i]) if group in placed else value
                placed.add(group)
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
    """Each shared Parameter's gradient summed over the stages (chunks) using it, every copy getting the sum (so
    the copies, updated alike, stay equal); in the same order in every process. Copies on one device group (two
    chunks of one stage, e.g. a tied embedding and head under zero_bubble_v) add up where they are; the groups' sums
    are summed with one collective (``transfer.Links.sum_copies``). Returns how many were summed."""
    for i, users in built.split.shared.items():
        groups: dict[frozenset, list[int]] = {}
        for c in users:
            groups.setdefault(frozenset(built.stages[c].param_sh[i].device_set), []).append(c)
        heads, shardings = [], []
        for chunks in groups.values():
            st = built.stages[chunks[0]]
            sh = st.param_sh[i]
            if st.owned:
                parts = place_owned([grads[c][built.stages[c].sg.params.index(i)] for c in chunks], [sh] * len(chunks))
                heads.append(sum(parts[1:], parts[0]))
            else:
                heads.append(None)
            shardings.append(sh)
        if len(groups) > 1:
            value = built.graph.values[built.graph.inputs[i]]
            heads = built.links.sum_copies(("shared", i), heads, shardings, value.shape, value.dtype)
        for chunks, g in zip(groups.values(), heads):
            for k, c in enumerate(chunks):
                if g is not None:  # each chunk's update takes (donates) its own buffer
                    grads[c][built.stages[c].sg.params.index(i)] = g if k == 0 else jax.device_put(
                        g, built.stages[c].param_sh[i], may_alias=False)
    return len(built.split.shared)
