"""The training loop's step: one compiled train step bound to the network's Variables and the optimizer's state.

A training loop calls the same program on the same state with batches of one signature, step after step. What
graphpar does around the executable is then paid on every step, on the cores where the devices' threads are running
the previous step: measured on the bench's tiny MLP (8 simulated devices on 2 cores), every microsecond of Python
per step cost several microseconds of step time, and graphpar's ~20 µs per step made its step ~8 % slower than the
hand-written JAX loop around the same kind of executable.

:class:`BoundStep` is what one binding needs, as plain attributes, so that a repeat of the call is answered in one
frame of C-level comparisons (:meth:`BoundStep.repeat`) and one step (:meth:`BoundStep.run`) is the executable call,
a C-level write of its results into the Variables' value slots and the in-flight limit. Anything else (a new batch
signature, another network structure or setting, a value replaced since the last step) goes back to
``TrainProgram``, which resolves the program, places the state and binds a step again.
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Sequence
from typing import Any

import jax

from graphpar import _context
from graphpar.compile.stages import Compiled
from graphpar.compile.state import NetworkState

SIGNATURE = operator.attrgetter("shape", "dtype", "sharding")  # of a placed input, as a binding keeps it
_JAX_ARRAY = itertools.repeat(jax.Array)


def input_signature(inputs: Sequence[Any]) -> list[tuple] | None:
    """``(shape, dtype, sharding)`` of each input when all are jax Arrays (else None: they need placing)."""
    if not all(map(isinstance, inputs, _JAX_ARRAY)):
        return None
    return list(map(SIGNATURE, inputs))


class BoundStep:
    """``compiled`` run on ``ns``'s Variables and ``optimizer``'s state, for batches of ``signature``.

    ``context``: the settings (``_context.settings()``, a deep copy) the program was chosen under. ``in_flight``:
    the queue of losses of steps still running, shared by every binding of one train program, kept to at most
    ``max_in_flight`` (XLA's CPU backend deadlocks in its collective rendezvous when many multi-device programs
    are queued on few cores, in plain JAX too; a queue of two keeps the devices as busy as a longer one).
    """

    def __init__(self, ns: NetworkState, compiled: Compiled, stacked: bool, context: tuple, signature: list,
                 optimizer: Any, in_flight: collections.deque, max_in_flight: int):
        self.ns = ns
        self.compiled = compiled
        self.stacked = stacked
        self.context = context
        self.signature = signature
        self._optimizer = optimizer
        self._in_flight = in_flight
        self._max_in_flight = max_in_flight
        self._compiled_run = compiled.run
        self._executable = compiled.executable is not None  # False in PYNATIVE_MODE: the step runs eagerly
        self._written: tuple[list, list] | None = None  # the values the last step of this binding wrote

    def answers(self, ns: NetworkState, inputs: Sequence[Any], stacked: bool, context: tuple) -> bool:
        """Whether this binding's program is the one for a call on ``ns`` with ``inputs`` under ``context``."""
        return (ns is self.ns and stacked == self.stacked and context == self.context
                and input_signature(inputs) == self.signature)

    def repeat(self, inputs: Sequence[Any], stacked: bool) -> jax.Array | None:
        """Run one step when this call repeats the last one (same structure, settings and batch signature, and
        every value still the one the last step wrote: nothing replaced it since, no ``set_data``, no checkpoint
        load) and return its loss; else None."""
        written, ns = self._written, self.ns
        if (written is None or stacked != self.stacked or not ns.is_current()
                or _context.settings() != self.context or not all(map(isinstance, inputs, _JAX_ARRAY))
                or list(map(SIGNATURE, inputs)) != self.signature):
            return None
        pvals, rvals = ns.params.values(), ns.rest.values()
        if not (all(map(operator.is_, pvals, written[0])) and all(map(operator.is_, rvals, written[1]))):
            return None
        return self.run(pvals, rvals, list(inputs))

    def run(self, pvals: list, rvals: list, inputs: list) -> jax.Array:
        """One step on values already where the program wants them: the new values go into the Variables (so
        ``param.asnumpy()`` shows trained values) and the optimizer; returns the loss."""
        optimizer = self._optimizer
        pvals, rvals, opt_state, loss = self._compiled_run(pvals, rvals, optimizer._box.state, inputs)
        if self._executable:  # concrete results of XLA's executable: the C-level write
            self.ns.params.store(pvals)
            self.ns.rest.store(rvals)
        else:  # PYNATIVE_MODE: the step ran eagerly (flax's checked write)
            self.ns.params.write(pvals)
            self.ns.rest.write(rvals)
        optimizer._box.state = opt_state
        self._written = (pvals, rvals)
        if self._executable and isinstance(loss, jax.Array):
            in_flight = self._in_flight
            in_flight.append(loss)
            while len(in_flight) > self._max_in_flight:
                in_flight.popleft().block_until_ready()
        return loss
