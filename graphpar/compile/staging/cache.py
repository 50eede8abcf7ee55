"""The compile cache: one entry per program, keyed by everything that changes the program.

A program is determined by its purpose (train step, sink loop, forward), the network's structure (the NNX graphdef:
its Cells, their static attributes such as each Cell's ``training`` flag, and where every Variable sits), the
signature of the batch (global shapes and dtypes; static call arguments for a forward call) and the settings of
``set_context``/``set_auto_parallel_context`` that reach the program (``save_graphs`` does not: dumping never
changes what runs). Switching a network between training and evaluation therefore finds both programs again; a
``set_train`` on one sub-Cell makes a new key, so the program that runs is always the one the dumps describe.

The counts of every stage run are exposed read-only (:attr:`ProgramCache.counts`): tests count compilations with
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import jax
import numpy as np

from graphpar import _context

T = TypeVar("T")


def signature(avals: Sequence[Any]) -> tuple:
    """Global shapes and dtypes of a batch."""
    return tuple((tuple(np.shape(x)), str(np.dtype(x.dtype)) if not jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.extended) else str(x.dtype)) for x in avals)


@dataclass(frozen=True)
class ProgramKey:
    purpose: str  # "train", "forward"
    structure: Any  # the NNX graphdef (hashable)
    signature: tuple
    context: tuple  # _context.compile_key()

    @staticmethod
    def of(purpose: str, structure: Any, avals: Sequence[Any], extra: tuple = ()) -> "ProgramKey":
        return ProgramKey(purpose, structure, signature(avals) + extra, _context.compile_key())


@dataclass(frozen=True)
class CompileCounts:
    """How often each stage ran for one cache (a snapshot)."""

    traces: int = 0
    plans: int = 0
    lowerings: int = 0
    compiles: int = 0
    loads: int = 0  # steps read back from the executable cache (``staging.executables``): no lowering, no compile
    prefetched: int = 0  # of those, read while the network was traced (``staging.prefetch``: the guessed key held)


class _Table(Generic[T]):
    def __init__(self) -> None:
        self.entries: dict[Any, T] = {}

    def get_or_build(self, key: Any, build: Callable[[], T]) -> tuple[T, bool]:
        found = self.entries.get(key)
        if found is not None:
            return found, False
        value = build()
        self.entries[key] = value
        return value, True


class ProgramCache:
    """Planned graphs by :class:`ProgramKey`; compiled programs by (key, variant) — variants of one planned graph
    are the single step and the sink loop."""

    def __init__(self) -> None:
        self.planned: _Table[Any] = _Table()
        self.compiled: _Table[Any] = _Table()
        self._counts = {"traces": 0, "plans": 0, "lowerings": 0, "compiles": 0, "loads": 0, "prefetched": 0}
        self.dumped: set[Any] = set()  # keys whose dumps were written (save_graphs turned on after a compile)

    def count(self, stage: str) -> None:
        self._counts[stage] += 1

    @property
    def counts(self) -> CompileCounts:
        return CompileCounts(**self._counts)
