"""Where the arrays of a compiled program live: the one protocol every plan's result answers.

A plan turns a planned graph into a :class:`Layout`; the step builder, the input feeder and the forward program ask
only these three questions, whatever the parallel mode. ``UniformLayout`` covers the plans whose placement does not
depend on the graph (one device; data parallel: state replicated, batches split), ``GraphLayout`` reads the storage
layouts the ``place_parameters`` pass chose for every parameter, state leaf and input, by value id.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from graphpar.ir.graph import Graph
from graphpar.planner.state_paths import parameter_of
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
    """The storage layouts the planner chose for a planned graph (``graph.plan.value_specs``, by value id): a named
    state leaf is the graph input of that name, batch input ``index`` the graph's ``index``-th data input; anything
    else is replicated."""

    def __init__(self, mesh: Mesh, graph: Graph):
        self.mesh = mesh
        self._specs: Mapping[int, Spec] = graph.plan.value_specs
        named: dict[str, int] = {}
        for kind in ("param", "state"):  # a Parameter's layout before a state leaf's of the same name
            for vid in graph.inputs:
                value = graph.values[vid]
                if value.kind == kind:
                    named.setdefault(value.name, vid)
        self._named = named
        self._inputs = [vid for vid in graph.inputs if graph.values[vid].kind == "input"]
        # spec -> its NamedSharding, made once: a first step asks for every parameter's sharding several times
        # (the optimizer's storage, the state's, the step's signature), and equal specs give one object, which
        # the comparisons with a placed array's sharding then settle by identity
        self._shardings: dict[Spec, NamedSharding] = {}

    def _sharding(self, vid: int | None, shape: tuple[int, ...]) -> NamedSharding:
        spec = self._specs.get(vid) if vid is not None else None
        spec = spec if spec is not None else tuple(() for _ in shape)
        found = self._shardings.get(spec)
        if found is None:
            found = self._shardings[spec] = NamedSharding(self.mesh, to_partition_spec(spec))
        return found

    def param_sharding(self, name, shape):
        return self._sharding(self._named.get(name), shape)

    def state_sharding(self, shape):
        return self._sharding(None, shape)

    def input_sharding(self, index, shape):
        return self._sharding(self._inputs[index] if index < len(self._inputs) else None, shape)


def state_shardings(tree: Any, params: Mapping[str, tuple[tuple[int, ...], jax.sharding.Sharding]],
                    other: Callable[[tuple[int, ...]], jax.sharding.Sharding]) -> Any:
    """The shardings of a state tree (an optimizer state), a pure function of its leaves' paths and shapes, as
    flax's ``nnx.get_partition_spec`` is of a state's metadata: a leaf that mirrors a parameter (its name in the
    path, its shape: :func:`parameter_of`) lives where ``params[name]`` says (``(shape, sharding)``), any other
    where ``other(shape)`` says."""
    def sharding(path: Any, leaf: Any) -> jax.sharding.Sharding:
        shape = tuple(np.shape(leaf))
        name = parameter_of(path, params)
        if name is not None and shape == tuple(params[name][0]):
            return params[name][1]
        return other(shape)

    return jax.tree_util.tree_map_with_path(sharding, tree)
