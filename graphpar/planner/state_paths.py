"""Which parameter an optimizer-state leaf belongs to, by its pytree path: the one place state leaves are matched to
parameters, for the memory model's optimizer slots (``planner.memory_model``) and the shardings of an optimizer
state (``compile.plans.layout.state_shardings``, the pipeline's per-stage states)."""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

import jax


def parameter_of(path: Sequence[Any], names: Container[str]) -> str | None:
    """The parameter an optimizer-state leaf at pytree ``path`` belongs to, or None for a shared leaf (a step
    count): optax states mirror the parameter dict, so a parameter's leaves (momentum, Adam's moments) hold its name
    in their path. The one place state leaves are matched to parameters."""
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey) and entry.key in names:
            return entry.key
    return None
