"""The stages of compiling a network, as values: ``Traced → Planned → Lowered → Compiled``.

The first two are a plan's results and live with the plans (``compile.plans.planned``); this module holds the two
the orchestrator makes from a ``Planned``. ``compile.staging.orchestrate`` produces them in order and the compile
cache keeps them; nothing reads a stage from an attribute some earlier call left behind. Each stage has
``as_text()`` (as ``jax.stages`` do): the traced jaxpr, the planned strategies, the StableHLO, the compiled HLO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from graphpar.compile.plans.layout import Layout
from graphpar.compile.plans.planned import Planned


@dataclass(frozen=True)
class StepSignature:
    """What a compiled function takes: the shardings of its arguments and results, the donated arguments."""

    in_shardings: tuple
    out_shardings: Any
    donate_argnums: tuple[int, ...] = ()


@dataclass(frozen=True)
class Lowered:
    """A step function of a planned graph in StableHLO with its signature. It holds what ``jax.stages.Lowered``
    holds (the module text, the argument avals and shardings), never argument values: it is kept beside its
    ``Compiled`` for ``as_text()``."""

    planned: Planned
    lowered: jax.stages.Lowered
    signature: StepSignature
    seconds: float = 0.0  # wall clock of the lowering
    cpu_seconds: float = 0.0  # the process's CPU time in it (steadier than wall on a loaded machine)
    effects: tuple[str, ...] = ()  # JAX effects of the traced step (DebugEffect: it calls back to the host)
    # per-compilation XLA options (compile.lowering.recompute.compiler_options: the CPU scheduler of a program
    # that recomputes)
    compiler_options: tuple[tuple[str, str], ...] = ()

    def as_text(self) -> str:
        return self.lowered.as_text()

    def compile(self) -> jax.stages.Compiled:
        """XLA's executable, compiled with :attr:`compiler_options`."""
        return self.lowered.compile(compiler_options=dict(self.compiler_options) or None)


@dataclass(frozen=True)
class Compiled:
    """A program ready to run: XLA's executable (GRAPH_MODE) or the Python step run eagerly (PYNATIVE_MODE)."""

    planned: Planned
    signature: StepSignature
    run: Callable[..., Any]  # jax.stages.Compiled (its C++ call path) or the plain Python function
    executable: jax.stages.Compiled | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # per stage, as built
    fn: Callable[..., Any] | None = None  # the Python function compiled (to lower it again)
    lowered: Lowered | None = None  # the stage it was compiled from (None in PYNATIVE_MODE)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # the process's CPU time per stage, as built

    def __call__(self, *args: Any) -> Any:
        return self.run(*args)

    @property
    def layout(self) -> Layout:
        return self.planned.layout

    @property
    def in_shardings(self) -> Sequence[Any]:
        return self.signature.in_shardings

    def as_text(self) -> str:
        if self.executable is None:
            return "# PYNATIVE_MODE: the step runs eagerly, op by op"
        return self.executable.as_text()


@dataclass(frozen=True)
class ProgramStages:
    """Every stage of one train-step program (``TrainProgram.stages``)."""

    planned: Planned
    lowered: Lowered
    compiled: Compiled

    @property
    def traced(self):
        return self.planned.traced


@dataclass(frozen=True, eq=False)
class StepRecipe:
    """What a step function is made of beyond its planned graph and signature, as its caller describes it for the
    executable cache (``staging.executables``): ``parts`` (the train cell, the optimizer, settings; digested by
    ``staging.fingerprint``) and the ``arguments``, the Variables whose values the step takes as arguments (so
    described by name, shape and dtype, not by value)."""

    parts: tuple
    arguments: Sequence[Any] = ()
