"""Where the arrays of a compiled program live: the one protocol every plan's result answers.

A plan turns a planned graph into a :class:`Layout`; the step builder, the input feeder and the forward program ask
only these three questions, whatever the parallel mode. ``UniformLayout`` covers the plans whose placement does not
depend on the graph (one device; data parallel: state replicated, batches split), ``GraphLayout`` reads the storage
layouts the ``place_parameters`` pass chose for every parameter, state leaf and input.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import jax
from jax.sharding import Mesh, NamedSharding

from graphpar.planner.strategy import Spec, to_partition_spec


class Layout(ABC):
    """Shardings of a program's parameters, other state and batch inputs."""

    mesh: Mesh | None = None

    @abstractmethod
    def param_sharding(self, name: str, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        """Where the Parameter (or other named state leaf) ``name`` is stored."""

    @abstractmethod
    def state_sharding(self, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        """Where an unnamed array lives (optimizer scalars, the reported loss)."""

    @abstractmethod
    def input_sharding(self, index: int, shape: tuple[int, ...]) -> jax.sharding.Sharding:
        """Where batch input ``index`` of global ``shape`` is placed."""


class UniformLayout(Layout):
    """Every state leaf in ``state``; every batch input with a dimension in ``batch``."""

    def __init__(self, state: jax.sharding.Sharding, batch: jax.sharding.Sharding, mesh: Mesh | None = None):
        self._state, self._batch, self.mesh = state, batch, mesh

    def param_sharding(self, name, shape):
        return self._state

    def state_sharding(self, shape):
        return self._state

    def input_sharding(self, index, shape):
        return self._batch if shape else self._state


class GraphLayout(Layout):
    """Storage layouts chosen by the planner, by (value kind, name); anything unnamed is replicated."""

    def __init__(self, mesh: Mesh, specs: Mapping[tuple[str, str], Spec]):
        self.mesh = mesh
        self._specs = dict(specs)

    def _sharding(self, spec: Spec | None, shape: tuple[int, ...]) -> NamedSharding:
        spec = spec if spec is not None else tuple(() for _ in shape)
        return NamedSharding(self.mesh, to_partition_spec(spec))

    def param_sharding(self, name, shape):
        spec = self._specs.get(("param", name))
        return self._sharding(spec if spec is not None else self._specs.get(("state", name)), shape)

    def state_sharding(self, shape):
        return self._sharding(None, shape)

    def input_sharding(self, index, shape):
        return self._sharding(self._specs.get(("input", f"input{index}")), shape)
