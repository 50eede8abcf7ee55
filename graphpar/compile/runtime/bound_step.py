"""The training loop's step: one compiled train step bound to the network's Variables and the optimizer's state.

A training loop calls the same program on the same state with batches of one signature, step after step. What
graphpar does around the executable is then paid on every step, on the cores where the devices' threads are running
the previous step: measured on the bench's tiny MLP (8 simulated devices on 2 cores), every microsecond of Python
per step cost several microseconds of step time.

:class:`BoundStep` is what one binding needs, resolved when it is bound (the optimizer's state slot, the
Variables in call order, whether the step returns one array), so that a repeat of the call is answered by
:meth:`BoundStep.repeat` in one Python frame: comparisons that do not grow with the settings or the network's size,
then the executable call, a C-level write of its results into the Variables' value slots and the in-flight limit
(:meth:`BoundStep.run`'s work, written out there: the general path's first step of a binding runs ``run``).
The training loop reaches it in two frames more (``TrainOneStepCell.__call__``, ``TrainProgram.run_step``).
The checks are change-triggered where a change has one door:

* settings: every assignment to a context field moves ``_context.settings_revision()``; Cells: every assignment
  of a ``training`` flag, a cast, a Parameter or a sub-Cell moves ``nn.cell.revision()``. The step compares the
  two numbers it was confirmed under; when either moved, the general path compares the settings, the flags and
  the split themselves (and re-binds only when they really differ). The revisions only gate this check, never a
  program.
* the batch: the same arrays as the last step's have its signature (one identity test per input); other arrays
  have their ``(shape, dtype, sharding)`` compared.
* the state: every Variable still holds the very array the last step wrote (``StateGroup.holds``: ``set_data``,
  an assignment, a checkpoint load all replace it), and no value nor input is a deleted array (donated to
  another jitted function: XLA's CPU client crashes the process on one, in plain JAX too). A write counter would
  make the first one comparison, but a Variable's value slot has no single door to count at: flax writes it from
  its setters and its graph updates, graphpar from the mixed-precision cast, the control-flow merge and this
  step's own store; the identity test costs about 0.1 µs per Variable.
* the optimizer state: the very object the last step wrote (one identity test: ``opt_state = ...``, a checkpoint
  load, a loss-scale change replace it, and the general path places the new one). Its arrays are checked for
  deletion only when ``Optimizer.opt_state`` handed them out since that step (``_StateBox.lent``): flattening the
  state to check every leaf would cost 1-3 µs a step even for a small network's, while nothing else can reach the
  arrays the step returned.

Anything else goes back to ``TrainProgram``, which resolves the program, places the state and binds a step again.
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Sequence
from typing import Any

import jax

from graphpar import _context
from graphpar.compile.staging.stages import Compiled
from graphpar.compile.lowering.network_state import READ_SLOT, SLOT, NetworkState, Slots, consume
from graphpar.errors import DeletedArrayError
from graphpar.nn import cell

SIGNATURE = operator.attrgetter("shape", "dtype", "sharding")  # of a placed input, as a binding keeps it
_JAX_ARRAY = itertools.repeat(jax.Array)
_DELETED = operator.methodcaller("is_deleted")


def input_signature(inputs: Sequence[Any]) -> list[tuple] | None:
    """``(shape, dtype, sharding)`` of each input when all are jax Arrays (else None: they need placing)."""
    if not all(map(isinstance, inputs, _JAX_ARRAY)):
        return None
    return list(map(SIGNATURE, inputs))


_settings_revision = _context.settings_revision
_cell_revision = cell.revision


def revision() -> tuple[int, int]:
    """The settings and Cell revisions now: read before the checks a binding is confirmed by."""
    return _settings_revision(), _cell_revision()


def check_live(names: Sequence[str], values: Sequence[Any]) -> None:
    """Refuse a deleted array among ``values`` (named by ``names``) with :class:`DeletedArrayError`."""
    for name, value in zip(names, values):
        if isinstance(value, jax.Array) and value.is_deleted():
            raise DeletedArrayError(name)


def any_deleted(tree: Any) -> bool:
    """Whether a leaf of ``tree`` is a deleted array."""
    return any(isinstance(leaf, jax.Array) and leaf.is_deleted() for leaf in jax.tree.leaves(tree))


def check_live_state(opt_state: Any) -> None:
    """Refuse a deleted array in the optimizer state with :class:`DeletedArrayError` naming its slot and Parameter,
    as optax keys them (``optimizer state 'trace' of Parameter 'fc1.weight'``, ``optimizer state 'count'``)."""
    if not any_deleted(opt_state):
        return
    for path, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]:
        if isinstance(leaf, jax.Array) and leaf.is_deleted():
            slots = [k.name for k in path if isinstance(k, jax.tree_util.GetAttrKey)]
            params = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
            slot = f"'{slots[-1]}'" if slots else jax.tree_util.keystr(path)
            raise DeletedArrayError(f"optimizer state {slot}" + (f" of Parameter '{params[-1]}'" if params else ""),
                                    "assign optimizer.opt_state a live state first (load_checkpoint / "
                                    "load_param_into_net, or the state before it was donated)")


class BoundStep:
    """``compiled`` run on ``ns``'s Variables and ``optimizer``'s state, for batches of ``signature``.

    ``input_checks``: the program's checks of batch inputs (``ops.runtime_checks.InputCheck``, positions in the
    call's inputs), made before each run. ``context``: the settings (``_context.settings()``, a deep copy) the
    program was chosen under; ``revision``:
    :func:`revision` when they and the network's split were last confirmed. ``in_flight``: the queue of losses of
    steps still running, shared by every binding of one train program, kept to at most ``max_in_flight`` (XLA's
    CPU backend deadlocks in its collective rendezvous when many multi-device programs are queued on few cores, in
    plain JAX too; a queue of two keeps the devices as busy as a longer one) by waiting for the oldest step on each
    call. Draining the queue to the newest step once it is full instead (the same bound, one wait per two steps)
    was measured on the bench's tiny MLP (8 devices on 2 cores, process CPU against the executable called
    directly): 1.016-1.023 against 1.027-1.033 on the shared machine, but 1.031-1.039 against 1.018-1.020 with the
    other core busy (likely: the devices' threads, left with one queued step, run out of work and sleep): not taken. The
    last step's batch stays referenced until the next step (its arrays are then recognised by identity).
    """

    def __init__(self, ns: NetworkState, compiled: Compiled, stacked: bool, context: tuple, signature: list,
                 optimizer: Any, in_flight: collections.deque, max_in_flight: int, revision: tuple[int, int],
                 input_checks: tuple = ()):
        self.ns = ns
        self.compiled = compiled
        # the checks the program left to the runtime, by position in the call's inputs (ops.runtime_checks)
        self.input_checks = input_checks
        self.stacked = stacked
        self.context = context
        self.signature = signature
        self.revision = revision
        # what every step reads, resolved once here: repeat() runs in one frame of attribute reads and C-level maps
        self._box = optimizer._box  # the optimizer's state slot (assigned once, in Optimizer.__init__)
        self._in_flight = in_flight
        self._max_in_flight = max_in_flight
        self._compiled_run = compiled.run
        self._executable = compiled.executable is not None  # False in PYNATIVE_MODE: the step runs eagerly
        slots = Slots.of(ns.params, ns.rest)
        self._holders = None if slots is None else slots.holders  # every Variable, params then rest
        self._last: tuple[list, list, list] | None = None  # what the last step wrote: params, rest, both
        self._batch: list = []  # the last step's inputs
        self._opt_state: Any = None  # the optimizer state the last step wrote
        self._live: list = []  # the last step's values and inputs, to test for a deleted array in one pass
        self._is_deleted = _DELETED
        self._loss_is_array = True  # whether the step returns one array (a functional step: any tree), from run

    def answers(self, ns: NetworkState, inputs: Sequence[Any], stacked: bool, context: tuple) -> bool:
        """Whether this binding's program is the one for a call on ``ns`` with ``inputs`` under ``context``."""
        return (ns is self.ns and stacked == self.stacked and context == self.context
                and input_signature(inputs) == self.signature)

    def repeat(self, inputs: Sequence[Any], stacked: bool) -> jax.Array | None:
        """Run one step when this call repeats the last one (no setting nor Cell flag assigned since, a batch of
        the same signature, every value still the one the last step wrote and none deleted) and return its loss;
        else None.

        The training loop's whole step is this one frame: :meth:`run`'s work for an executable is written out
        here rather than called (on the bench's tiny MLP, 8 devices sharing 2 cores, each µs of Python per step
        costs 0.5-0.9 % of the step; a Python call about 0.1 µs)."""
        last = self._last
        if (last is None or stacked != self.stacked or _settings_revision() != self.revision[0]
                or _cell_revision() != self.revision[1]):
            return None
        pvals, rvals, values = last
        batch = self._batch
        if len(inputs) == len(batch) and all(map(operator.is_, inputs, batch)):
            # arrays that went through the executable: its own type's is_deleted (a C-level call per array)
            deleted = self._executable and any(map(self._is_deleted, self._live))
        elif all(map(isinstance, inputs, _JAX_ARRAY)) and list(map(SIGNATURE, inputs)) == self.signature:
            batch = list(inputs)
            deleted = self._executable and (any(map(self._is_deleted, values)) or any(map(_DELETED, batch)))
        else:
            return None
        holders = self._holders
        if deleted or not (all(map(operator.is_, map(READ_SLOT, holders), values)) if holders is not None
                           else self.ns.params.holds(pvals) and self.ns.rest.holds(rvals)):
            return None  # the general path re-places a replaced value and names a deleted one
        box = self._box
        if box.state is not self._opt_state or (box.lent and any(map(_DELETED, jax.tree.leaves(box.state)))):
            return None  # the optimizer state replaced, or handed out and deleted since: likewise
        if not self._executable or holders is None:
            return self.run(pvals, rvals, batch)
        # from here on, run() for an executable's concrete results on Variables alone
        pvals, rvals, box.state, loss = self._compiled_run(pvals, rvals, box.state, batch)
        self._opt_state, box.lent = box.state, False  # arrays no one outside the step has seen yet
        values = pvals + rvals
        self._last, self._batch, self._live = (pvals, rvals, values), batch, values + batch
        consume(map(object.__setattr__, holders, SLOT, values))
        in_flight = self._in_flight
        in_flight.append(loss if self._loss_is_array else _stands_for(loss, values))
        while len(in_flight) > self._max_in_flight:
            in_flight.popleft().block_until_ready()
        return loss

    def run(self, pvals: list, rvals: list, inputs: list) -> Any:
        """One step on values already where the program wants them: the new values go into the Variables (so
        ``param.asnumpy()`` shows trained values) and the optimizer; returns the loss (a functional step: what its
        function returns)."""
        ns, box = self.ns, self._box
        pvals, rvals, box.state, loss = self._compiled_run(pvals, rvals, box.state, inputs)
        self._opt_state, box.lent = box.state, False  # arrays no one outside the step has seen yet
        values = pvals + rvals
        self._last, self._batch, self._live = (pvals, rvals, values), inputs, [*values, *inputs]
        if not self._executable:  # PYNATIVE_MODE: the step ran eagerly (flax's checked write)
            ns.params.write(pvals)
            ns.rest.write(rvals)
            return loss
        holders = self._holders  # concrete results of XLA's executable: the C-level write
        if holders is not None:
            consume(map(object.__setattr__, holders, SLOT, values))
        else:
            ns.params.store(pvals)
            ns.rest.store(rvals)
        self._loss_is_array = isinstance(loss, jax.Array)  # the same for every run of one executable
        done = loss if self._loss_is_array else _stands_for(loss, values)
        self._is_deleted = type(done).is_deleted
        in_flight = self._in_flight
        in_flight.append(done)
        while len(in_flight) > self._max_in_flight:
            in_flight.popleft().block_until_ready()
        return loss


def _stands_for(loss: Any, values: list) -> jax.Array:
    """The array a functional step's result (``compile.functional``: what its function returns) is waited on by:
    its first array, else the first new value."""
    return next(iter(jax.tree.leaves(loss)), values[0])
