"""``graphpar.common.api``: MindSpore's ``mindspore.common.api`` entry points that tests and tools use to compile a
network without running it and to read the strategies its plan chose.

``_cell_graph_executor.compile(net, *inputs)`` plans ``net`` (a ``TrainOneStepCell``: its train step; any other
Cell: its forward) under the context in force, for the ``device_num`` devices the context names, none of which
need exist (MindSpore compiles there for a simulated cluster the same way). As MindSpore's, it compiles one rank:
in SEMI_AUTO / AUTO each input is that rank's part (without ``full_batch`` the ranks of a pipeline stage stack their
rows, a ``dataset_strategy`` tuple multiplies each dimension by its split; ``compile.plans.global_batch``). A
strategy that cannot hold raises when it is compiled, as MindSpore's (``StrategyError`` is a ``RuntimeError``
too). ``_get_shard_strategy(net)`` returns what that compile chose, keyed as MindSpore keys it
(``"Default/network-Net/MatMul-op0": [[2, 4], [4, 1]]``; ``graphpar.compile.plans.op_strategies``), or, for a
train cell ``Model.train`` ran, what its step runs; ``net.parameter_layout_dict`` each Parameter's layout in the
same compile (``compile.plans.parameter_layout``).

This module sits in the ``common`` layer, below the engine: the engine's side (:class:`GraphCompiler`) is
registered by the root ``graphpar/__init__.py`` (``graphpar.compile.cell_executor``), as ``nn.runner`` is.
The executor keeps each Cell's last compiled strategies, as MindSpore's graph executor keeps its compiled phases:
that is the contract of ``_get_shard_strategy``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Protocol

from graphpar.errors import GraphparError


@dataclass(frozen=True)
class CompiledCell:
    """What one compile of a Cell decided, as MindSpore's tests read it: ``strategies`` (``_get_shard_strategy``)
    and ``parameter_layouts`` (``Cell.parameter_layout_dict``); both empty when the mode plans nothing."""

    strategies: dict[str, list] = field(default_factory=dict)
    parameter_layouts: dict[str, list] = field(default_factory=dict)
    # get_parallel_graph_info: builds this rank's parallel graph when a caller asks (most compiles never do)
    graph_info: Callable[[], dict[str, dict]] | None = None


class GraphCompiler(Protocol):
    """What the executor needs from the engine."""

    def compile(self, obj: Any, args: tuple) -> CompiledCell:
        """Plan ``obj`` for ``args`` under the context in force (empty records when the mode plans none:
        STAND_ALONE, DATA_PARALLEL)."""
        ...

    def trained(self, obj: Any) -> CompiledCell | None:
        """What the step ``obj`` last ran was planned with (a train cell after ``Model.train``), or None."""
        ...


class CompilerMissingError(GraphparError, RuntimeError):
    """The executor was used before ``graphpar.compile`` registered its side (``graphpar/__init__.py`` does)."""


class NoFusionGroupsError(GraphparError, NotImplementedError):
    """A question about MindSpore's AllReduce fusion groups, which graphpar does not have (XLA combines the
    reductions); raised by ``_get_allreduce_fusion``."""


class NotCompiledError(GraphparError, ValueError):
    """``_get_shard_strategy(obj)`` for a Cell neither compiled by the executor nor run as a train step."""


_compiler: GraphCompiler | None = None


def register_graph_compiler(compiler: GraphCompiler) -> None:
    """Install the engine's side (called once, by the root ``graphpar/__init__.py``)."""
    global _compiler
    _compiler = compiler


def _engine() -> GraphCompiler:
    if _compiler is None:
        raise CompilerMissingError("no graph compiler is registered: import graphpar (its __init__ registers it)")
    return _compiler


class UnknownPhaseError(GraphparError, KeyError):
    """``_graph_executor.get_parallel_graph_info(phase)`` / ``get_strategy(phase)`` for a phase no compile of this
    process returned."""


class _GraphExecutor:
    """MindSpore's ``_cell_graph_executor._graph_executor`` (its C++ ``GraphExecutorPy``), as far as its parallel
    unit tests read it: what each compiled phase decided, by the phase ``compile`` returned. Its ``ParallelValidator``
    reads ``get_parallel_graph_info(phase)`` (this rank's parallel graph, ``graphpar.dump.parallel_graph``) and
    ``get_strategy(phase)`` (each op's strategy, keyed ``"Default/..."`` as ``_get_shard_strategy``)."""

    _KEPT = 16  # compiled phases kept (each holds its planned graph): tests read the phase they just compiled

    def __init__(self) -> None:
        self._phases: dict[str, CompiledCell] = {}

    def _add(self, phase: str, compiled: CompiledCell) -> None:
        self._phases[phase] = compiled
        while len(self._phases) > self._KEPT:
            del self._phases[next(iter(self._phases))]

    def _phase(self, phase: str) -> CompiledCell:
        if phase not in self._phases:
            raise UnknownPhaseError(f"no compiled phase {phase!r}: pass the phase _cell_graph_executor.compile(net, "
                                    f"*inputs) returned (known: {sorted(self._phases)[-3:]} ...)")
        return self._phases[phase]

    def get_parallel_graph_info(self, phase: str) -> dict[str, dict]:
        """``{"@graph_0": {cnode name: {"inputs": [...], "attrs": {...}}}}`` of the phase's parallel graph on this
        rank (``global_rank``); empty when the mode plans nothing. Built when asked for, from the phase's plan."""
        build = self._phase(phase).graph_info
        return {} if build is None else build()

    def get_strategy(self, phase: str) -> dict[str, list]:
        """Each op's strategy in the phase, keyed as ``_get_shard_strategy`` keys it."""
        return dict(self._phase(phase).strategies)

    def get_parameter_layout(self, phase: str) -> dict[str, list]:
        """``parameter_layout_dict`` of the phase."""
        return dict(self._phase(phase).parameter_layouts)


class _CellGraphExecutor:
    """MindSpore's ``_cell_graph_executor`` (and its older name ``_executor``): compile a Cell, read its plan."""

    def __init__(self) -> None:
        self._compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._graph_executor = _GraphExecutor()
        self._count = 0  # numbers the phases this executor returned, as MindSpore's phase names are unique

    def compile(self, obj: Any, *args: Any, phase: str = "predict", **kwargs: Any) -> tuple[str, bool]:
        """Plan ``obj`` for ``args``. ``phase`` is MindSpore's name for the compiled graph ("train", "predict"); a
        ``TrainOneStepCell`` plans its train step and any other Cell its forward, whatever it says. Returns the
        compiled phase (``phase`` with a number, unique in this executor, as MindSpore's) and True."""
        if kwargs:
            raise TypeError(f"_cell_graph_executor.compile(): unexpected keyword argument(s) {sorted(kwargs)}; it "
                            "takes the Cell, its inputs and phase=")
        compiled = _engine().compile(obj, args)
        self._compiled[obj] = compiled
        self._count += 1
        key = f"{phase}.{self._count}"
        self._graph_executor._add(key, compiled)
        return key, True

    def _last(self, obj: Any) -> CompiledCell | None:
        if obj in self._compiled:
            return self._compiled[obj]
        return _engine().trained(obj)

    def _get_shard_strategy(self, obj: Any) -> dict[str, list]:
        """``{op key: one list of splits per input}`` of ``obj``'s last compile (see the module docstring)."""
        found = self._last(obj)
        if found is None:
            raise NotCompiledError(f"_get_shard_strategy({type(obj).__name__}): this Cell was not compiled; call "
                                   "_cell_graph_executor.compile(cell, *inputs) (or train it) first")
        return dict(found.strategies)

    def parameter_layouts(self, obj: Any) -> dict[str, list]:
        """``Cell.parameter_layout_dict``: each Parameter's layout in ``obj``'s last compile (or the step it last
        ran), ``{}`` before any, as MindSpore's (``graphpar.compile.plans.parameter_layout`` says what each entry
        holds)."""
        found = self._last(obj)
        return {} if found is None else dict(found.parameter_layouts)

    def _get_allreduce_fusion(self, obj: Any) -> dict[str, int]:
        """MindSpore's ``{parameter name: fusion group}`` of the gradient AllReduces it inserted. graphpar assigns no
        fusion groups: each reduction is XLA's, and XLA's all-reduce combiner merges a step's reductions by size
        and dependencies after the plan, so there is no per-Parameter group to report. Refused by name."""
        raise NoFusionGroupsError(
            f"_cell_graph_executor._get_allreduce_fusion({type(obj).__name__}): graphpar has no AllReduce fusion "
            "groups to report: XLA's all-reduce combiner merges the step's gradient reductions by size (comm_fusion "
            "and set_comm_fusion are said to have no effect); the collectives XLA compiled are in the execute dump "
            "(set_context(save_graphs=True); graphpar.dump.hlo.parse_collectives reads a compiled HLO's)")

    _get_strategy = _get_shard_strategy  # MindSpore 1.x's name


_cell_graph_executor = _CellGraphExecutor()
_executor = _cell_graph_executor  # MindSpore 1.x's name
