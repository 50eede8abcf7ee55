"""Checks of values known only when a step runs (class labels in range), made inside the compiled program.

MindSpore's sparse cross-entropy kernel raises on a label outside ``[0, classes)``; a jitted JAX gather clamps or
fills instead, and a one-hot row of an out-of-range label is all zeros, so the loss and gradient of that sample are
0 and training goes on. The check cannot be a Python ``if`` (the labels are traced values) and must not cost a host
sync per step (the training loop keeps two steps in flight). So an op that takes indices records, while it is
traced, a predicate evaluated in the program:

* :func:`check_index_range` reduces the indices to two numbers, the largest and the negated smallest out-of-range
  index (``INT32_MIN`` when there is none): one ``max`` reduction, so under SEMI_AUTO/DATA_PARALLEL one small
  all-reduce of two integers (``pmax`` over the data-parallel replica axis when tracing under it), nothing else;
* only when one is out of range, a ``lax.cond`` branch calls back to the host (``jax.debug.callback``, unordered:
  the dispatching thread never waits for it) with that pair and the :class:`CheckSite` (op, scope, valid range)
  fixed at trace time. The callback appends a :class:`Violation` to this process's list; a valid step never calls
  back.

A check on a batch input itself (the labels a loss op takes straight from the batch: the common case) is not
compiled into the program when the runtime asks for that (``ir.recorder``'s ``defer_input_checks``, which
``Model.train``/``eval``'s programs set): on a GPU an in-program ``lax.cond`` copies its predicate to the host
mid-step, a stall that doubled a ResNet-50 step on an H100 (22.4 against 11.1 ms at batch 256). The op records an
:class:`InputCheck` in the graph instead, and the program calls :func:`check_inputs` on each batch: a host array is
checked at once with numpy (a bad batch is refused before its step runs), a device array by a small jitted
reduction dispatched beside the step, whose result is read once ready (:func:`pending` polls without waiting).

The runtime reads the list lazily (:func:`raise_pending`: when the next step is dispatched, when Model reads a
step's loss; :func:`flush`, which first waits for the callbacks of the steps already dispatched, at the end of an
epoch, of ``Model.eval`` and of ``Model.train``) and raises :class:`~graphpar.errors.RuntimeCheckError`.

Why not ``jax.experimental.checkify``: it functionalizes the whole step (every primitive of the interpreter, the
data-parallel vmap, scans, custom derivatives, pipelines) and returns an error value every program would have to
carry as an extra output, and reading it (``err.throw()``/``err.get()``) is a host sync per step. The callback
here leaves every program's signature and, for valid data, its host traffic unchanged.
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from graphpar.communication.rank_axis import current_axis
from graphpar.errors import RuntimeCheckError
from graphpar.ir import recorder as _recorder
from graphpar.ops.primitive import Primitive

_NONE = int(np.iinfo(np.int32).min)  # "no out-of-range index" in a reduced pair


@dataclass(frozen=True)
class CheckSite:
    """Where a check was traced: the op (instance name and kind), its Cell scope, what it checks and the valid
    range ``[low, high)``."""

    op: str
    kind: str
    scope: str
    what: str
    low: int
    high: int


@dataclass(frozen=True)
class Violation:
    """A step in which ``site``'s check failed: the largest and smallest out-of-range value seen."""

    site: CheckSite
    largest: int
    smallest: int


_violations: collections.deque[Violation] = collections.deque()  # appended by callbacks on XLA's threads
# the sites traced in this process: flush() waits only when a program may hold a check (a run without one pays no
# wait); never part of a compile key
_sites: set[CheckSite] = set()


def _record(site: CheckSite, pair: np.ndarray) -> None:
    """Host side of a failed check (runs on XLA's thread): keep it for the runtime to raise."""
    rows = np.asarray(pair).reshape(-1, 2)  # one row per replica when called under a vmap
    rows = rows[(rows != _NONE).any(axis=1)]
    if len(rows):
        _violations.append(Violation(site, int(rows[:, 0].max()), -int(rows[:, 1].max())))


@dataclass(frozen=True)
class InputCheck:
    """A check deferred to the runtime: batch input ``input`` must hold indices in ``site``'s range."""

    input: int
    site: CheckSite


def _out_of_range(indices: jax.Array, low: int, high: int) -> jax.Array:
    """The pair (largest out-of-range index, negated smallest one), ``_NONE`` where there is none."""
    index = jnp.asarray(indices).astype(jnp.int32).reshape(-1)
    bad = (index < low) | (index >= high)
    return jnp.max(jnp.stack([jnp.where(bad, index, _NONE), jnp.where(bad, -index, _NONE)]), axis=1)


def check_index_range(indices: jax.Array, high: int, op: Primitive, what: str) -> None:
    """Check, in the program being traced, that ``indices`` lie in ``[0, high)`` (``op``: the graphpar op that
    takes them, for the message). Run eagerly (PYNATIVE_MODE), the same code records a violation at once. When
    ``indices`` is a batch input of a trace that defers such checks, the check is left to the runtime."""
    recorder = _recorder.active()
    site = CheckSite(op.instance_name, op.name, recorder.scope if recorder is not None else "", what, 0, int(high))
    _sites.add(site)
    if recorder is not None and recorder.defer_input_checks:
        j = recorder.batch_input_index(indices)
        if j is not None:
            recorder.input_checks.append(InputCheck(j, site))
            return
    pair = _out_of_range(indices, 0, int(high))
    axis = current_axis()
    if axis is not None:  # the data-parallel vmap: one answer for all replicas, so the branch is not batched
        pair = jax.lax.pmax(pair, axis)
    jax.lax.cond(jnp.any(pair != _NONE), lambda p: jax.debug.callback(functools.partial(_record, site), p),
                 lambda p: None, pair)


_pair_of = jax.jit(_out_of_range, static_argnums=(1, 2))  # one small program per input shape and range
# (site, pair) of device batches checked beside their steps, oldest first; read once ready (pending, flush)
_in_flight: collections.deque[tuple[CheckSite, jax.Array]] = collections.deque()


def check_inputs(checks: tuple[InputCheck, ...], inputs: list | tuple) -> bool:
    """Make a program's deferred checks on the batch ``inputs`` it is about to run on (the global batch, or a
    sink loop's stacked batches): a host array now, a device array by :data:`_pair_of` dispatched beside the step,
    without waiting for it (its violation is raised at a later dispatch or :func:`flush`, as an in-program check's
    is). True when a host array failed: the caller raises (:func:`raise_pending`) before running the step."""
    failed = False
    for check in checks:
        x, site = inputs[check.input], check.site
        if isinstance(x, jax.Array):
            _in_flight.append((site, _pair_of(x, site.low, site.high)))
            continue
        index = np.asarray(x).reshape(-1)
        bad = index[(index < site.low) | (index >= site.high)]
        if bad.size:
            _violations.append(Violation(site, int(bad.max()), int(bad.min())))
            failed = True
    return failed


def _collect(wait: bool) -> None:
    """Record the violations of checked device batches whose pairs are ready (all of them when ``wait``)."""
    while _in_flight and (wait or _in_flight[0][1].is_ready()):
        site, pair = _in_flight.popleft()
        values = np.asarray(pair)
        if (values != _NONE).any():
            _record(site, values)


def pending() -> bool:
    """Whether a failed check is waiting to be raised (no wait: a checked device batch counts once its small
    result is ready)."""
    if _in_flight:
        _collect(wait=False)
    return bool(_violations)


def raise_pending() -> None:
    """Raise :class:`RuntimeCheckError` for the failed checks recorded so far (clearing the list): the first
    site's, with the range of out-of-range values over every step that failed it."""
    if not _violations:
        return
    found = []
    while _violations:  # popleft, not copy-then-clear: a callback may append meanwhile (XLA's threads)
        found.append(_violations.popleft())
    site = found[0].site
    same = [v for v in found if v.site == site]
    low, high = min(v.smallest for v in same), max(v.largest for v in same)
    seen = f"value {low}" if low == high else f"values from {low} to {high}"
    raise RuntimeCheckError(site.op, site.kind, site.scope,
                            f"{site.what} outside the valid range [{site.low}, {site.high}) reached {len(same)} "
                            f"step(s) (out-of-range {seen})",
                            f"{site.what.capitalize()} are class indices {site.low}..{site.high - 1} for a "
                            f"{site.high}-class output; check the dataset's {site.what} (MindSpore's kernel "
                            "refuses them too)")


def flush() -> None:
    """Wait for the checks of every step dispatched so far (``jax.effects_barrier``; only once a check was
    traced), then :func:`raise_pending`: the one host sync, at the end of an epoch or an evaluation."""
    if _sites:
        jax.effects_barrier()
    _collect(wait=True)
    raise_pending()
