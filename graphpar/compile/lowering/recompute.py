"""Recomputation: ``Cell.recompute()`` and ``Primitive.recompute()`` lowered to ``jax.checkpoint``.

MindSpore marks the nodes of a recomputed Cell (or a single primitive) so that the backward pass recomputes their
outputs from the Cell's inputs instead of keeping them alive. graphpar does the same at the lowering: the traced
graph knows each node's Cell scope, and ``graph.recompute_scopes`` (filled while tracing) says which
scopes were marked. :func:`segments` cuts the node list into runs; a run of consecutive nodes of one recomputed
Cell (or of recomputed primitives) is evaluated inside ``jax.checkpoint`` by the interpreter, so autodiff saves
only the run's inputs and recomputes the rest in the backward pass.

The policy follows the Cell's options:

* ``mp_comm_recompute=True`` (default): nothing inside the run is saved, model-parallel communication included
  (``jax.checkpoint_policies.nothing_saveable``);
* ``mp_comm_recompute=False``: the outputs of model-parallel communication (redistributions, the reductions of
  split contractions, collective ops) are named :data:`COMM` and saved, so the backward pass recomputes the
  arithmetic but does not communicate again (``save_only_these_names``).

A gradient taken inside ``construct`` (``GradOperation`` in a Cell run as a forward program, MindSpore's recompute
sample) is traced into the program by JAX at once, backward equations included, so a checkpoint at the lowering
would come too late. There the recomputed Cell runs under ``jax.checkpoint`` while it is traced
(``nn._recompute.checkpointed``); the trace walks the checkpoint's backward into nodes of one ``Node.remat`` run
(its recomputed ops are op nodes, planned with their rules), and :func:`segments` keeps each such run one checkpoint
whose inputs pass an optimization barrier (``interpret``), as JAX's own lowering of a differentiated checkpoint does.

The parallel optimizer's level3 (``compile.opt_shard``) differentiates the whole step through ``jax.checkpoint``
that keeps only the *activations*: the outputs of nodes computed from the batch, which the interpreter names
:data:`ACTIVATION` while :func:`naming_activations` is in force. Everything computed from the parameters alone —
the gathered weights and what ops derive from them (transposes, casts) — is recomputed by the backward pass, so
it gathers the weights again. (A policy that saves everything but the gathered weights would keep their
transposes instead: the same bytes, and XLA then has no second gather to make.)

``parallel_optimizer_comm_recompute``: the parallel optimizer gathers parameters once per step outside any Cell
(``compile.opt_shard``), so the gathered weights are inputs of the run and are kept (``False``, MindSpore's
default); ``True`` is refused by name (use ``optimizer_level="level3"``, which re-gathers every weight).

The Cell's setting itself (:class:`RecomputeConfig`, validated from the keywords, and the name :data:`COMM`) lives
with the Cell in ``graphpar.nn._recompute``; this module lowers it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import jax

from graphpar._env import xla_flags
from graphpar._logging import notice_once
from graphpar.nn._recompute import COMM as COMM
from graphpar.nn._recompute import RecomputeConfig as RecomputeConfig
from graphpar.nn.cell import Cell
from graphpar.ops.primitive import Primitive

ACTIVATION = "graphpar_activation"  # checkpoint name of node outputs computed from the batch (level3 keeps these)
_naming: contextvars.ContextVar[bool] = contextvars.ContextVar("graphpar_naming_activations", default=False)


@contextlib.contextmanager
def naming_activations() -> Iterator[None]:
    """While tracing inside it, the interpreter names every node output computed from the batch
    :data:`ACTIVATION` (for :func:`activations_only`)."""
    token = _naming.set(True)
    try:
        yield
    finally:
        _naming.reset(token)


def names_activations() -> bool:
    return _naming.get()


def activations_only() -> Callable[..., Any]:
    """The checkpoint policy that saves the named activations and recomputes everything else."""
    return jax.checkpoint_policies.save_only_these_names(ACTIVATION)


_COLLECTIVE_KINDS = frozenset({"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AlltoAll", "NeighborExchange",
                               "psum", "all_gather", "reduce_scatter", "all_to_all", "ppermute", "pmax", "pmin"})
PRIMITIVE = RecomputeConfig()  # the config of a primitive marked recompute()


def _scope_config(scope: str, scopes: dict[str, RecomputeConfig]) -> tuple[str, RecomputeConfig] | None:
    """The outermost recomputed Cell scope that ``scope`` lies in."""
    best = None
    for path, config in scopes.items():
        if (scope == path or scope.startswith(path + "/")) and (best is None or len(path) < len(best[0])):
            best = (path, config)
    return best


def segments(graph: Any) -> list[tuple[RecomputeConfig | None, list[Any]]]:
    """The graph's nodes in order, cut into runs: ``(None, nodes)`` evaluate normally, ``(config, nodes)`` inside
    ``jax.checkpoint`` with ``config``'s policy. The nodes of one backward recomputation (``Node.remat``: a
    recomputed Cell under a gradient taken in ``construct``) are one run of their own, apart from the forward
    nodes of the same Cell: inside one checkpoint XLA would compute the two once."""
    scopes = graph.recompute_scopes
    out: list[tuple[Any, Any, list[Any]]] = []
    for node in graph.node_list():
        found = _scope_config(node.scope, scopes) if scopes else None
        if node.remat is not None:  # a backward recomputation traced under a gradient taken in construct
            key, config = ("remat", node.remat), (found[1] if found is not None else PRIMITIVE)
        elif found is not None:
            key, config = ("cell", found[0]), found[1]
        elif node.attrs.get("recompute") is True:
            key, config = ("primitive",), PRIMITIVE
        else:
            key, config = None, None
        if out and out[-1][0] == key:
            out[-1][2].append(node)
        else:
            out.append((key, config, [node]))
    return [(config, nodes) for _, config, nodes in out]


def is_communication(node: Any) -> bool:
    """A node whose output is produced by communication: a collective op, or a split contraction's reduction."""
    if node.kind in _COLLECTIVE_KINDS:
        return True
    strategy = node.strategy
    return strategy is not None and bool(strategy.partial_axes)


def uses_recompute(network: Cell) -> bool:
    """Whether any Cell of ``network`` is marked ``recompute()`` or holds a primitive marked so."""
    for _, cell in network.cells_and_names():
        if cell.recompute_config is not None:
            return True
        if any(isinstance(v, Primitive) and v.attrs.get("recompute") is True for v in vars(cell).values()):
            return True
    return False


def recomputes_in_backward(graph: Any) -> bool:
    """Whether ``graph`` holds a backward recomputation traced into it (``Node.remat``: a recomputed Cell under a
    gradient taken in ``construct``, ``nn._recompute.checkpointed``)."""
    return any(node.remat is not None for node in graph.node_list())


MEMORY_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def advise_cpu_scheduler(network: Cell, platform: str, regather: bool = False) -> None:
    """Say once how to make recomputation (``Cell.recompute()``, or the parallel optimizer's level3 when
    ``regather``) pay off on CPU.

    XLA's CPU backend schedules with a concurrency-optimized scheduler by default, which runs every recomputation
    as early as it can and keeps the results alive, undoing what recomputation saves (measured on an 8-layer FFN:
    temp memory 111 MB plain, 114 MB recomputed; 61 MB recomputed with the memory scheduler). The choice is read
    from ``XLA_FLAGS`` when the backend starts (a per-compilation option is accepted and ignored), so graphpar can
    only advise it. GPU and TPU schedulers are memory-aware already.
    """
    if platform != "cpu" or MEMORY_SCHEDULER_FLAG in xla_flags():
        return
    if uses_recompute(network):
        notice_once("recompute-cpu-scheduler", "recompute(): on CPU, XLA's default scheduler keeps recomputed "
                    "activations alive; start the process with XLA_FLAGS=" + MEMORY_SCHEDULER_FLAG +
                    " for recomputation to lower memory")
    if regather:
        notice_once("level3-cpu-scheduler", "optimizer_level='level3': on CPU, XLA's default scheduler gathers the "
                    "weights for the backward pass early and keeps them alive; start the process with XLA_FLAGS=" +
                    MEMORY_SCHEDULER_FLAG + " for level3 to lower memory")
