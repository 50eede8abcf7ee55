"""The skeleton every program of a network is built on: its settings per compile key, its state, its stage cache.

A program is a network's compiled entry point: the train step (``runtime.program.TrainProgram``), the forward call
(``runtime.forward.ForwardProgram``), the pipelined train step (``pipeline.program.PipelineProgram``), a per-rank
call (``runtime.spmd_call.CellPerRankProgram``). They differ in what they build and how they run it; what they share
lives here, once, so that no program re-derives it (or reads it from another's private helpers):

* **the settings it reads, snapshotted once per compile key** (:attr:`Program.settings`): each program says in
  :meth:`Program.read_settings` which settings it reads (the execution plan, and e.g. the train step's
  ``grad_accumulation_step`` and parallel-optimizer settings) as one frozen value; the snapshot is taken the first
  time a ``_context.compile_key()`` is seen and found again for that key. A program reads settings only from its
  snapshot, so a change of any setting selects a whole other snapshot, never a mix of an old setting and a new
  plan;
* **the network state** (:attr:`Program.state`): the network split into pure state (``NetworkState``), split again
  after any ``set_train`` or assignment in its tree;
* **the orchestrator and its compile cache** (``staging.orchestrate``, ``staging.cache``), with the read-only
  counts of every stage run (:attr:`Program.counts`) and the seconds spent building.

Placing arguments is shared too, as plain functions (``runtime.placement``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Generic, TypeVar

from graphpar import _context
from graphpar.common.parameter import Parameter
from graphpar.compile.lowering.network_state import NetworkState, current_state
from graphpar.compile.staging.cache import CompileCounts
from graphpar.compile.staging.orchestrate import Orchestrator
from graphpar.nn.cell import Cell

Settings = TypeVar("Settings")


class Program(ABC, Generic[Settings]):
    """A network's programs: one per compile key, built by ``orchestrator`` and kept in its cache.

    ``what`` names the program in progress lines (``"Net train step"``); ``network`` is the Cell tree whose state
    the programs run on.
    """

    def __init__(self, what: str, network: Cell):
        self.network = network
        self.orchestrator = Orchestrator(what)
        self._settings: dict[tuple, Settings] = {}
        self._ns: NetworkState | None = None

    # --- what a program says about itself -----------------------------------------------------------------------
    @abstractmethod
    def read_settings(self) -> Settings:
        """Every setting this program reads, read now (called once per compile key)."""

    def trainable(self) -> Sequence[Parameter]:
        """The Parameters the program updates (split apart from the rest of the state); none by default."""
        return []

    # --- what every program has ---------------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        """The settings snapshot for the settings in force (taken once per ``_context.compile_key()``)."""
        key = _context.compile_key()
        found = self._settings.get(key)
        if found is None:
            found = self._settings[key] = self.read_settings()
        return found

    @property
    def state(self) -> NetworkState:
        """The network split for the compiled programs (re-split after any ``set_train`` in its tree)."""
        self._ns = current_state(self._ns, self.network, self.trainable())
        return self._ns

    @property
    def counts(self) -> CompileCounts:
        """How many traces, plans, lowerings and XLA compiles this program has run (read-only snapshot)."""
        return self.orchestrator.cache.counts

    @property
    def compile_seconds(self) -> float:
        """Seconds spent building every program so far (trace, plan, lower, XLA compile)."""
        cache = self.orchestrator.cache
        return (sum(p.seconds for p in cache.planned.entries.values())
                + sum(sum(c.seconds.values()) for c in cache.compiled.entries.values()))

