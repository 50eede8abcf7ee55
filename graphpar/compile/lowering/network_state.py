"""A Cell tree split into the pure state a compiled step takes and gives back.

``NetworkState`` splits a network with flax NNX into its graph definition, the *trainable* parameters (those the
optimizer owns), the *rest* (frozen parameters, BatchNorm statistics, random keys: every other Variable) and the
*constants* (every Tensor a Cell holds that is not a Parameter, ``self.keep_prob = Tensor(0.9)``). Each state group
is kept as the live NNX ``State`` (holding the network's own Variables), so reading the current values is a flatten
and writing new values back is one assignment per Variable (:meth:`StateGroup.store` for an executable's results:
a C-level loop, no Python frame per Variable).

The constants follow MindSpore's graph mode, where a Cell's Tensor attribute is a value node of the graph and only
a Parameter is mutable state: they enter the trace as concrete arrays, so ``if self.keep_prob < 1.0:`` in
``construct`` is decided while tracing, and their content is part of the :class:`NetworkStructure` that keys the
compiled programs. Rebinding one outside ``construct`` (``net.keep_prob = Tensor(0.5)``) moves
``nn.cell.structure_revision``, so the next call splits again and finds (or compiles) the program of the new value
(MindSpore keeps running the graph it compiled first; a graphpar step never runs with a stale constant). Assigning
one inside ``construct`` is refused (:meth:`NetworkState.split_after`), as MindSpore's graph mode refuses an
assignment to a ``self`` attribute that is not a Parameter.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import operator
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from graphpar.common.parameter import Parameter
from graphpar.errors import CellError
from graphpar.nn.cell import Cell, structure_revision

class StateGroup:
    """One group of a split network: its live State, flatten definition and Variables in leaf order.

    A leaf that is not a Variable has no holder to write into: :meth:`write` assigns it back to its attribute on
    ``root``, so that a donated old array is never read again (:class:`NetworkState` gives its groups Variables
    only: a Cell's plain Tensors are its constants).
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


def _child(node: Any, key: Any) -> Any:
    """One step of an NNX path: an item of a list (or CellList) by index, of a dict by key, else an attribute."""
    return node[key] if isinstance(key, int) or isinstance(node, dict) else getattr(node, key)


def _read(root: Any, path: Sequence[Any]) -> Any:
    """The value at ``path`` below ``root``: a Variable's value, or the plain attribute (list item) itself."""
    node = root
    for key in path:
        node = _child(node, key)
    return node.get_raw_value() if isinstance(node, nnx.Variable) else node


def _assign(root: Any, path: Sequence[Any], value: Any) -> None:
    """Set the attribute (or list item) at ``path`` below ``root`` to ``value``."""
    parent = root
    for key in path[:-1]:
        parent = _child(parent, key)
    if isinstance(path[-1], int) or isinstance(parent, dict):
        parent[path[-1]] = value
    else:
        setattr(parent, path[-1], value)


_FLAGS = operator.attrgetter("training", "_amp_cast")  # what makes a Cell's traced graph change


@dataclasses.dataclass(frozen=True)
class NetworkStructure:
    """What a network's compiled programs are keyed by: its NNX graphdef (Cells, static attributes, where each
    Variable sits) and its constants, each as ``(path, shape, dtype, sha256 of the content)``."""

    graphdef: Any
    constants: tuple[tuple[str, tuple[int, ...], str, str], ...]


def _constant_key(path: Sequence[Any], value: Any) -> tuple[str, tuple[int, ...], str, str]:
    """A constant by content: equal Tensors key the same program, a rebound value with new content a new one."""
    dtype = str(value.dtype)
    if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
        value = jax.random.key_data(value)
    array = np.ascontiguousarray(np.asarray(value))
    return (".".join(map(str, path)), array.shape, dtype, hashlib.sha256(array.tobytes()).hexdigest())


def _owner(root: Cell, path: Sequence[Any]) -> tuple[str, str]:
    """``(class name, attribute path)`` of the Cell holding the attribute at ``path`` (a list item's Cell is the
    list's holder)."""
    node, owner, where = root, root, []
    for key in path[:-1]:
        node = _child(node, key)
        if isinstance(node, Cell):
            owner, where = node, [*where, str(key)]
    return type(owner).__name__, ".".join(where) or "the network"


class NetworkState:
    """``network`` split into graphdef + trainable group + rest group + constants.

    The :class:`NetworkStructure` (graphdef and constants) is the network's *structure*: hashable, it keys the
    compile cache. A split stays valid while no Cell's ``training`` flag (or ``to_float`` cast) changes and no
    Parameter, sub-Cell or Tensor attribute is assigned (:meth:`is_current`; the training loop runs it only after
    ``nn.cell.revision()`` moved); a ``set_train`` anywhere in the tree, or a rebound constant, makes the next call
    re-split and look its programs up by the new structure.
    """

    def __init__(self, network: Cell, trainable: Sequence[Parameter]):
        ids = {id(p) for p in trainable}
        self.revision = structure_revision()  # read before the split it stands for
        self.network = network
        self.cells = [cell for _, cell in network.cells_and_names()]
        self.flags = list(map(_FLAGS, self.cells))
        graphdef, params, rest, constants = nnx.split(network, lambda path, v: id(v) in ids, nnx.Variable, ...)
        self.graphdef = graphdef
        self.params = StateGroup(params, network)
        self.rest = StateGroup(rest, network)
        self.constants = constants
        flat = list(nnx.to_flat_state(constants))
        self._constant_items = [(tuple(path), value) for path, value in flat]
        self._structure = NetworkStructure(graphdef, tuple(_constant_key(p, v) for p, v in self._constant_items))
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
    def structure(self) -> NetworkStructure:
        """The hashable structure the compile cache keys programs by."""
        return self._structure

    def merge(self, params: nnx.State, rest: nnx.State) -> Cell:
        """A copy of the network holding ``params`` and ``rest`` (traced values, in a trace) and its constants
        (concrete arrays: Python control flow on them is decided while tracing)."""
        # fresh Variables at the caller's trace level, so construct may assign to them under vmap/grad (PYNATIVE)
        return nnx.merge(self.graphdef, params, rest, self.constants, copy=True)

    def split_after(self, model: Cell) -> nnx.State:
        """The rest-group state of a merged model after it ran (its updated statistics and keys). Raises
        :class:`CellError` if ``construct`` assigned a Tensor attribute that is not a Parameter.

        ``model`` is :meth:`merge`'s copy of this split's structure. While no Cell attribute was assigned (the
        structure revision unmoved), the rest group's leaves sit at the paths they sat at in the split: each is read
        there (the Variable's value, or the plain attribute) and unflattened with the group's definition, with no
        second walk of the whole Cell tree (``nnx.split`` visits every Cell and Variable of the network to find the
        few that are not trainable: a tenth of tracing a transformer). Otherwise the tree is split again and its
        constants compared with the split's."""
        if structure_revision() == self.revision:
            if not self.rest.paths:  # nothing but trainable parameters
                return self.rest.state
            return self.rest.unflatten([_read(model, path) for path in self.rest.paths])
        paths = self.trainable_paths
        _, _, rest, constants = nnx.split(model, lambda path, v: tuple(path) in paths, nnx.Variable, ...)
        after = [(tuple(path), value) for path, value in nnx.to_flat_state(constants)]
        if len(after) != len(self._constant_items) or not all(
                a[0] == b[0] and a[1] is b[1] for a, b in zip(after, self._constant_items)):
            before, now = dict(self._constant_items), dict(after)
            path = next((p for p, v in after if before.get(p) is not v), None) or next(
                p for p in before if p not in now)  # assigned (or added) in construct, else deleted there
            cell, where = _owner(model, path)
            raise CellError(
                f"Cell '{cell}' ({where}): construct assigned the Tensor attribute '{path[-1]}', which is not a "
                "Parameter; a Cell's Tensor attributes are constants of the compiled graph (as in MindSpore's graph "
                f"mode): hold it as a Parameter (self.{path[-1]} = Parameter(Tensor(...), requires_grad=False)) to "
                "update it in construct, or assign it outside construct (the next call compiles for the new value)")
        return rest

    def param_names(self) -> list[str]:
        return self.params.names()


def param_dict(names: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(names, values))





def current_state(ns: NetworkState | None, network: Cell, trainable: Sequence[Parameter]) -> NetworkState:
    """``ns`` if it still describes ``network``, else a fresh split."""
    if ns is not None and ns.is_current():
        return ns
    return NetworkState(network, trainable)
