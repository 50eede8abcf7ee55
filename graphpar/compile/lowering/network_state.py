"""A Cell tree split into the pure state a compiled step takes and gives back.

``NetworkState`` splits a network with flax NNX into its graph definition, the *trainable* parameters (those the
optimizer owns) and the *rest* (frozen parameters, BatchNorm statistics, random keys, array constants). Each group is
kept as the live NNX ``State`` (holding the network's own Variables), so reading the current values is a flatten
and writing new values back is one assignment per Variable (:meth:`StateGroup.store` for an executable's results:
a C-level loop, no Python frame per Variable).
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Sequence
from typing import Any

import jax
from flax import nnx

from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell, structure_revision

class StateGroup:
    """One group of a split network: its live State, flatten definition and Variables in leaf order.

    A leaf that is not a Variable (a plain array a Cell holds as an attribute, such as the tutorial loss's
    ``self.on_value = Tensor(1.0)``) has no holder to write into: :meth:`write` assigns it back to its attribute
    on ``root``, so that a donated old array is never read again.
    """

    def __init__(self, state: nnx.State, root: Any = None):
        self.root = root
        self.state = state
        leaves, self.treedef = jax.tree.flatten(state)
        flat = list(nnx.to_flat_state(state))
        self.paths = [path for path, _ in flat]
        self.holders: list[Any] = [value for _, value in flat]
        # which leaves are Variables, decided once (flax's isinstance check is a Python-level metaclass hook, and
        # values()/write() run on every training step)
        self._variables = [isinstance(h, nnx.Variable) for h in self.holders]
        self.only_variables = all(self._variables)
        self._names: list[str] | None = None
        if len(self.holders) != len(leaves):  # pragma: no cover - NNX invariant
            raise RuntimeError("graphpar: NNX state flattened to an unexpected number of leaves")

    def values(self) -> list[Any]:
        if self.only_variables:  # the training loop's case: a C-level read of each value slot (see store)
            return list(map(READ_SLOT, self.holders))
        return [h.get_raw_value() if var else h for h, var in zip(self.holders, self._variables)]

    def holds(self, values: Sequence[Any]) -> bool:
        """Whether every leaf still holds the very object in ``values`` (nothing assigned since they were
        written): the training loop's per-step check, streamed without building a list."""
        if self.only_variables:
            return all(map(operator.is_, map(READ_SLOT, self.holders), values))
        return all(map(operator.is_, self.values(), values))

    def store(self, values: Sequence[jax.Array]) -> None:
        """Write a compiled executable's outputs back (what :meth:`write` does, at a fraction of its per-step cost).

        NNX's setter checks, twice per Variable, that it is not mutated from another trace level (four Python
        frames and two reads of JAX's trace state each: about half of the ~20 µs graphpar spent per step around a
        tiny model's executable, and several times that when the devices' threads share the cores). An
        executable's outputs are concrete arrays written at top level, where that check always passes, so they
        go into the Variables' value slot directly (``set_raw_value`` without its check); anything else takes
        :meth:`write`.
        """
        if not self.only_variables:
            self.write(values)
            return
        consume(map(object.__setattr__, self.holders, SLOT, values))

    def write(self, values: Sequence[Any]) -> None:
        """Assign ``values`` to the Variables (and plain attributes) of this group."""
        for i, (holder, var, value) in enumerate(zip(self.holders, self._variables, values)):
            if var:
                holder.set_raw_value(value)
            elif value is not holder:
                self.holders[i] = value
                if self.root is not None:
                    _assign(self.root, self.paths[i], value)

    def unflatten(self, values: Sequence[Any]) -> nnx.State:
        return jax.tree.unflatten(self.treedef, list(values))

    def names(self) -> list[str]:
        """Parameter names (MindSpore's), or the attribute path of other state; computed once per split."""
        if self._names is None:
            self._names = [holder.name if isinstance(holder, Parameter) else ".".join(str(p) for p in path)
                           for path, holder in zip(self.paths, self.holders)]
        return self._names


# A flax Variable keeps its value in the ``_raw_value`` slot (``get_raw_value`` returns it, ``set_raw_value`` checks
# the trace level and assigns it). The per-step read and write of every Variable go to the slot directly: no Python
# frame per Variable. flax is pinned below 0.13 (pyproject); a renamed slot fails loudly (Variables have __slots__).
# The training loop's step (``runtime.bound_step``) makes the same read and write inline, in its own frame.
READ_SLOT = operator.attrgetter("_raw_value")
SLOT = itertools.repeat("_raw_value")
consume = collections.deque(maxlen=0).extend  # runs a map to its end without a Python frame per item


class Slots:
    """The value slots of the Variables of several groups (of Variables alone) as one flat list: the training loop
    compares and writes a whole step's state in one C-level pass each (:meth:`of` gives None when a group also
    holds plain attributes: those take :meth:`StateGroup.holds` / :meth:`StateGroup.store`)."""

    def __init__(self, holders: list[Any]):
        self.holders = holders

    @staticmethod
    def of(*groups: StateGroup) -> "Slots | None":
        if not all(g.only_variables for g in groups):
            return None
        return Slots([h for g in groups for h in g.holders])

    def holds(self, values: Sequence[Any]) -> bool:
        """Whether every slot still holds the very object in ``values``."""
        return all(map(operator.is_, map(READ_SLOT, self.holders), values))

    def store(self, values: Sequence[jax.Array]) -> None:
        """:meth:`StateGroup.store` over every group at once."""
        consume(map(object.__setattr__, self.holders, SLOT, values))


def _read(root: Any, path: Sequence[Any]) -> Any:
    """The value at ``path`` below ``root``: a Variable's value, or the plain attribute (list item) itself."""
    node = root
    for key in path:
        node = node[key] if isinstance(key, int) else getattr(node, key)
    return node.get_raw_value() if isinstance(node, nnx.Variable) else node


def _assign(root: Any, path: Sequence[Any], value: Any) -> None:
    """Set the attribute (or list item) at ``path`` below ``root`` to ``value``."""
    parent = root
    for key in path[:-1]:
        parent = parent[key] if isinstance(key, int) else getattr(parent, key)
    if isinstance(path[-1], int):
        parent[path[-1]] = value
    else:
        setattr(parent, path[-1], value)


_FLAGS = operator.attrgetter("training", "_amp_cast")  # what makes a Cell's traced graph change


class NetworkState:
    """``network`` split into graphdef + trainable group + rest group.

    The graphdef is the network's *structure*: its Cells, their static attributes (every Cell's ``training``
    flag among them) and where each Variable sits. It is hashable, so it keys the compile cache. A split stays
    valid while no Cell's ``training`` flag (or ``to_float`` cast) changes and no Parameter or sub-Cell is assigned
    (:meth:`is_current`; the training loop runs it only after ``nn.cell.revision()`` moved); a ``set_train``
    anywhere in the tree makes the next call re-split and look its programs up by the new structure.
    """

    def __init__(self, network: Cell, trainable: Sequence[Parameter]):
        ids = {id(p) for p in trainable}
        self.revision = structure_revision()  # read before the split it stands for
        self.network = network
        self.cells = [cell for _, cell in network.cells_and_names()]
        self.flags = list(map(_FLAGS, self.cells))
        graphdef, params, rest = nnx.split(network, lambda path, v: id(v) in ids, ...)
        self.graphdef = graphdef
        self.params = StateGroup(params, network)
        self.rest = StateGroup(rest, network)
        self.trainable_paths = frozenset(self.params.paths)
        missing = ids - {id(h) for h in self.params.holders}
        if missing:
            names = [p.name for p in trainable if id(p) in missing]
            raise ValueError(f"the optimizer updates Parameters that the network does not use: {names}; pass "
                             "the network's own parameters (net.trainable_params())")

    def is_current(self) -> bool:
        """True while every Cell's ``training`` flag (and mixed-precision cast) is as it was at the split and no
        Cell attribute was assigned since (``nn.cell.structure_revision``: a replaced Parameter or sub-Cell)."""
        return self.revision == structure_revision() and list(map(_FLAGS, self.cells)) == self.flags

    @property
    def structure(self) -> Any:
        """The hashable structure the compile cache keys programs by."""
        return self.graphdef

    def merge(self, params: nnx.State, rest: nnx.State) -> Cell:
        # fresh Variables at the caller's trace level, so construct may assign to them under vmap/grad (PYNATIVE)
        return nnx.merge(self.graphdef, params, rest, copy=True)

    def split_after(self, model: Cell) -> nnx.State:
        """The rest-group state of a merged model after it ran (its updated statistics and keys).

        ``model`` is :meth:`merge`'s copy of this split's structure, so the rest group's leaves sit at the paths
        they sat at in the split: each is read there (the Variable's value, or the plain attribute) and unflattened
        with the group's definition. No second walk of the whole Cell tree (``nnx.split`` visits every Cell and
        Variable of the network to find the few that are not trainable: a tenth of tracing a transformer)."""
        if not self.rest.paths:  # nothing but trainable parameters
            return self.rest.state
        return self.rest.unflatten([_read(model, path) for path in self.rest.paths])

    def param_names(self) -> list[str]:
        return self.params.names()


def param_dict(names: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(names, values))





def current_state(ns: NetworkState | None, network: Cell, trainable: Sequence[Parameter]) -> NetworkState:
    """``ns`` if it still describes ``network``, else a fresh split."""
    if ns is not None and ns.is_current():
        return ns
    return NetworkState(network, trainable)
