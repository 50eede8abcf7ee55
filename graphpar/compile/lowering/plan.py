"""The lowering plan: everything about lowering a planned graph that does not depend on traced values, as one value.

A planned graph is lowered node by node inside the step function JAX differentiates (``compile.lowering.interpret``).
What that needs besides the traced values is fixed by the graph, the mesh and how the step is traced: each node's
:class:`~graphpar.compile.lowering.pins.Step` (its body, the input pins with their ``NamedSharding``, the output pins
left after pin elision, its body key), the repeated runs of nodes that are one shared call
(``compile.lowering.call_groups``), the runs of recomputed nodes that are one ``jax.checkpoint``
(``compile.lowering.recompute``), which single nodes are a call of a shared function (:func:`shared_calls`), and
which node outputs are named activations (level3 of the parallel optimizer). :func:`lowering_plan` works all of it
out in one pass into a :class:`LoweringPlan`, a frozen list of units in graph order, and the interpreter only binds.

Once per graph: a planned graph is lowered more than once (the step and its ``sink_size`` loop, a fresh lowering for
a dump or a benchmark, every micro-batch variant), so the plan is computed on the first lowering and kept for the
graph's lifetime (:func:`lowering_plan`'s cache is keyed by the graph object: a ``Planned`` holds one graph, which
no one changes after planning). The jit functions the plan's shared calls and groups become are made per lowering
(``interpret.run``), as a user's step function makes its own.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jax.sharding import Mesh

from graphpar._logging import notice_once
from graphpar.compile.lowering import call_groups, channels_last, recompute
from graphpar.compile.lowering.call_groups import Group
from graphpar.compile.lowering.layout_rules import Perm
from graphpar.compile.lowering.pins import Step, prepare
from graphpar.ir.graph import Graph


@dataclass(frozen=True)
class Checkpointed:
    """A run of recomputed nodes, evaluated inside ``jax.checkpoint`` with ``config``'s policy: its arguments are the
    values it reads from outside (``inputs``; the constants it reads, ``consts``, are closed over), its results the
    values read after it (``outputs``). Its steps are bound inline: inside a checkpoint nothing is a shared call.
    ``recomputes``: the run is a backward recomputation already traced into the graph (``Node.remat``), whose
    inputs pass an optimization barrier first, as JAX's own checkpoint lowering does: XLA must neither merge it with
    the forward nodes it repeats nor compute it before the backward needs it."""

    steps: tuple[Step, ...]
    config: recompute.RecomputeConfig
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    consts: tuple[tuple[int, Any], ...]
    recomputes: bool = False


Unit = Step | Group | Checkpointed


@dataclass(frozen=True)
class LoweringPlan:
    """A planned graph, ready to bind: ``units`` in graph order, each a single node (:class:`Step`: inline, or a call
    of ``calls[step.share]`` when its body repeats), a repeated run of nodes (:class:`Group`) or a recomputed run
    (:class:`Checkpointed`). ``inputs``/``outputs``: the graph's, as value ids; ``consts``: the values of its
    constants. ``calls``: the shared-call table, one step per body key two or more plain nodes compute (the shared
    function is that step's pinned body). ``named``: nodes whose outputs are named activations (computed from the
    batch, while ``recompute.naming_activations`` is in force), empty otherwise."""

    units: tuple[Unit, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    consts: tuple[tuple[int, Any], ...]
    calls: Mapping[int, Step]
    named: frozenset[int] = frozenset()
    output_perms: tuple[Perm, ...] = ()  # per output, the layout it is held in (channels-last), () when all written


def shared_calls(steps: Sequence[Step]) -> dict[int, Step]:
    """The body keys (:attr:`Step.share`) that two or more of ``steps`` compute, each with the first such step.

    Why: every node JAX differentiates and lowers costs it a trace per primitive (linearizing, transposing,
    emitting MLIR), and a deep network repeats the same few bodies hundreds of times (a 256-layer MLP: three). A
    ``jit`` call of one function object is traced once, and JAX caches its linearization, transposition and MLIR
    function by jaxpr, so those costs are paid once per distinct body; each call still runs under its node's named
    scope (``op_name`` of what XLA inlines keeps the call site's), and its pins are inside the call, so the
    partitioner sees the same layouts."""
    count: dict[int, int] = {}
    first: dict[int, Step] = {}
    for step in steps:
        if step.share is not None:
            count[step.share] = count.get(step.share, 0) + 1
            first.setdefault(step.share, step)
    return {key: first[key] for key, n in count.items() if n > 1}


def _named_activations(graph: Graph) -> frozenset[int]:
    """Nodes computed from the batch (level3 and pipeline stages name their outputs): a node that reads a batch
    input or the output of such a node. A pipeline stage's graph also takes the activations earlier stages computed
    (inputs whose producer is a node of another stage's graph): computed from the batch too, so a later stage keeps
    its ops' outputs as the first does instead of recomputing its whole forward in the backward pass."""
    from_batch = {v for v in graph.inputs if graph.values[v].kind == "input"
                  or (graph.values[v].producer is not None and graph.values[v].producer not in graph.nodes)}
    named: set[int] = set()
    for node in graph.node_list():
        if any(v in from_batch for v in node.inputs):
            from_batch.update(node.outputs)
            named.add(node.id)
    return frozenset(named)


def _checkpointed(graph: Graph, steps: list[Step], config: recompute.RecomputeConfig,
                  last_read: dict[int, int], end: int) -> Checkpointed:
    """``steps`` (a recomputed run ending at position ``end`` of the graph's order) as a :class:`Checkpointed`;
    ``last_read``: each value's last reading position (the graph's outputs: past every node)."""
    nodes = [step.node for step in steps]
    inside = {v for node in nodes for v in node.outputs}
    const = {v: graph.values[v].const for node in nodes for v in node.inputs if graph.values[v].kind == "const"}
    ext = dict.fromkeys(v for node in nodes for v in node.inputs if v not in inside and v not in const)
    # read after the run: the order is topological, so a reader outside the run comes after it
    needed = tuple(v for node in nodes for v in node.outputs if last_read.get(v, -1) > end)
    return Checkpointed(tuple(steps), config, tuple(ext), needed, tuple(const.items()),
                        recomputes=nodes[0].remat is not None)


def plan_lowering(graph: Graph, mesh: Mesh | None = None, vmapped_axes: frozenset[str] = frozenset(),
                  name_activations: bool = False, channels_last_on: bool = False) -> LoweringPlan:
    """The :class:`LoweringPlan` of ``graph`` (uncached: :func:`lowering_plan` is the cached one). With ``mesh``,
    layouts are pinned, less ``vmapped_axes`` (mesh axes a surrounding ``jax.vmap(spmd_axis_name=...)`` already
    splits over); ``name_activations``: level3 of the parallel optimizer (``recompute.naming_activations``), whose
    per-node naming keeps every node a call site of its own (no groups, no shared calls); ``channels_last_on``: run
    the channels-last pass (``compile.lowering.channels_last``)."""
    layouts = channels_last.plan_graph(graph) if channels_last_on else None
    if layouts is not None and not layouts.nodes:
        layouts = None
    if layouts is not None:
        notice_once(f"channels-last:{graph.name}:{layouts.convolutions}:{layouts.edges}",
                    f"{graph.name}: {layouts.convolutions} convolution(s) and the ops between them run channels-last; "
                    f"{layouts.edges} transpose(s) where values leave that region (set_context(format_transform="
                    "'off') runs them as written)", logging.INFO)
    steps = prepare(graph, mesh, vmapped_axes, layouts)
    segments = recompute.segments(graph)
    plain = [[steps[node.id] for node in nodes] for config, nodes in segments if config is None]
    # runs of nodes repeated as a whole: one shared call each; a node outside the groups whose body others compute
    # too is a shared call as it is without groups (counted over every plain node: a call and an inline body can get
    # different layouts from XLA)
    units = iter(call_groups.plan_units(graph, plain) if not name_activations else plain)
    calls = shared_calls([s for seg in plain for s in seg]) if not name_activations else {}
    position = {nid: k for k, nid in enumerate(graph.order)}
    last_read = {v: position[node.id] for node in graph.node_list() for v in node.inputs}
    last_read.update((v, len(position)) for v in graph.outputs)
    planned: list[Unit] = []
    for config, nodes in segments:
        if config is None:
            planned.extend(next(units))
        else:
            planned.append(_checkpointed(graph, [steps[node.id] for node in nodes], config, last_read,
                                         position[nodes[-1].id]))
    consts = tuple((vid, value.const) for vid, value in graph.values.items() if value.kind == "const")
    outs = layouts.output_perms(graph.outputs) if layouts is not None else ()
    return LoweringPlan(tuple(planned), tuple(graph.inputs), tuple(graph.outputs), consts, calls,
                        _named_activations(graph) if name_activations else frozenset(),
                        outs if any(p is not None for p in outs) else ())


_plans: dict[int, dict[tuple[Any, ...], LoweringPlan]] = {}  # id(graph) -> its plans, dropped with the graph


def lowering_plan(graph: Graph, mesh: Mesh | None = None, vmapped_axes: frozenset[str] = frozenset(),
                  name_activations: bool = False, channels_last_on: bool = False) -> LoweringPlan:
    """:func:`plan_lowering`, computed once per graph and arguments (see the module docstring). The plan holds the
    graph's nodes, never the graph, so the entry goes when the graph does."""
    per_graph = _plans.get(id(graph))
    if per_graph is None:
        per_graph = _plans[id(graph)] = {}
        weakref.finalize(graph, _plans.pop, id(graph), None)
    key = (mesh, vmapped_axes, name_activations, channels_last_on)
    found = per_graph.get(key)
    if found is None:
        found = per_graph[key] = plan_lowering(graph, mesh, vmapped_axes, name_activations, channels_last_on)
    return found
