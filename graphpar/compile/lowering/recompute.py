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
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax.extend.core import ClosedJaxpr, Jaxpr

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
SCHEDULER_OPTION = "xla_cpu_scheduler_type"  # a per-compilation debug option of XLA:CPU
MEMORY_SCHEDULER = "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"
_USER_SCHEDULER_FLAGS = ("xla_cpu_enable_concurrency_optimized_scheduler", SCHEDULER_OPTION)


@functools.cache
def _checkpoint_primitive() -> str:
    """The name of ``jax.checkpoint``'s primitive in this JAX (``remat2`` in 0.10), read from a traced one."""
    return jax.make_jaxpr(jax.checkpoint(lambda x: x * 2.0))(1.0).eqns[0].primitive.name


def recomputes(jaxpr: Any) -> bool:
    """Whether a traced program holds a ``jax.checkpoint`` (recomputed Cells, the parallel optimizer's level3), in
    its equations or any jaxpr they call (each sub-jaxpr read once)."""
    seen: set[int] = set()
    todo = [jaxpr]
    while todo:
        j = todo.pop()
        j = j.jaxpr if isinstance(j, ClosedJaxpr) and not isinstance(j, Jaxpr) else j  # one type in jax >= 0.12
        if id(j) in seen:
            continue
        seen.add(id(j))
        for eqn in j.eqns:
            if eqn.primitive.name == _checkpoint_primitive():
                return True
            for value in eqn.params.values():
                items = value if isinstance(value, (tuple, list)) else (value,)
                todo.extend(v for v in items if isinstance(v, (ClosedJaxpr, Jaxpr)))
    return False


@functools.cache
def _memory_scheduler_known(platform: str) -> bool:
    """Whether this XLA:CPU takes :data:`SCHEDULER_OPTION` per compilation (older builds refuse the name): one
    compilation of a scalar add, once per process."""
    try:
        jax.jit(lambda x: x + 1).lower(1.0).compile(compiler_options={SCHEDULER_OPTION: MEMORY_SCHEDULER})
    except Exception:  # XLA's INVALID_ARGUMENT for an option it does not know
        return False
    return True


def compiler_options(platform: str, jaxpr: Any) -> tuple[tuple[str, str], ...]:
    """The per-compilation XLA options of a program: on CPU, a program that recomputes is scheduled by XLA's
    memory-optimized scheduler (its default concurrency-optimized one runs recomputations as early as it can and
    keeps the results alive, so recomputation saved nothing), unless ``XLA_FLAGS`` chooses a CPU scheduler."""
    if platform != "cpu" or any(f in xla_flags() for f in _USER_SCHEDULER_FLAGS) or not recomputes(jaxpr):
        return ()
    return ((SCHEDULER_OPTION, MEMORY_SCHEDULER),) if _memory_scheduler_known(platform) else ()


def advise_cpu_scheduler(network: Cell, platform: str, regather: bool = False) -> None:
    """Say once how to make recomputation (``Cell.recompute()``, or the parallel optimizer's level3 when
    ``regather``) pay off on CPU where graphpar cannot choose XLA's scheduler itself.

    XLA's CPU backend schedules with a concurrency-optimized scheduler by default, which runs every recomputation
    as early as it can and keeps the results alive, undoing what recomputation saves (measured on an 8-layer FFN:
    temp memory 220 MB plain, 227 MB recomputed; 124 MB recomputed with the memory scheduler). graphpar compiles
    programs that recompute with the per-compilation option ``xla_cpu_scheduler_type=`` :data:`MEMORY_SCHEDULER`
    (:func:`compiler_options`; ``--xla_cpu_enable_concurrency_optimized_scheduler`` is read once from
    ``XLA_FLAGS`` when the backend starts, and ignored per compilation); only an XLA that does not know that option
    leaves the advice to set the flag. GPU and TPU schedulers are memory-aware already.
    """
    if platform != "cpu" or any(f in xla_flags() for f in _USER_SCHEDULER_FLAGS):
        return
    recomputed = uses_recompute(network)
    if not (recomputed or regather) or _memory_scheduler_known(platform):
        return
    if recomputed:
        notice_once("recompute-cpu-scheduler", "recompute(): on CPU, XLA's default scheduler keeps recomputed "
                    "activations alive; start the process with XLA_FLAGS=" + MEMORY_SCHEDULER_FLAG +
                    " for recomputation to lower memory")
    if regather:
        notice_once("level3-cpu-scheduler", "optimizer_level='level3': on CPU, XLA's default scheduler gathers the "
                    "weights for the backward pass early and keeps them alive; start the process with XLA_FLAGS=" +
                    MEMORY_SCHEDULER_FLAG + " for level3 to lower memory")
