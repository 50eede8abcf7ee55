"""Which data-parallel replica the code being traced runs as.

DATA_PARALLEL runs the per-device loss under ``jax.vmap`` over the device axis (see ``compile.step``). Stochastic
Cells (Dropout) fold the replica index into their key so each device draws its own mask, as each MindSpore device
does with its own seed.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax

_axis: contextvars.ContextVar[str | None] = contextvars.ContextVar("graphpar_replica_axis", default=None)


@contextlib.contextmanager
def replica_axis(name: str) -> Iterator[None]:
    token = _axis.set(name)
    try:
        yield
    finally:
        _axis.reset(token)


def current_axis() -> str | None:
    return _axis.get()


def fold_in_replica(key: jax.Array) -> jax.Array:
    """``key`` folded with this replica's index when tracing under the data-parallel vmap, else ``key``."""
    name = _axis.get()
    if name is None:
        return key
    return jax.random.fold_in(key, jax.lax.axis_index(name))
