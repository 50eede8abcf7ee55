"""The lowering interpreter: re-evaluate a planned graph inside ``jax.jit``, pinning every layout.

For each node in order: constrain each array input to the layout the node's strategy needs
(``with_sharding_constraint``), evaluate the node's equations under the named scope ``{scope}/{instance}#{id}``, and
constrain each output to the layout the strategy gives it. XLA's SPMD partitioner then inserts exactly the
collectives those layouts imply (an all-reduce for a contracted split, an all-gather or all-to-all for a
redistribution), and the named scope travels into the HLO metadata, which is how the execute dump attributes every
collective to its op. Gradients follow by autodiff of this function (a sharding constraint's transpose constrains
the cotangent alike).

Cost. The function JAX differentiates and lowers must be as plain as one a JAX user writes, or lowering a big graph
costs more than XLA compiling it. So an op node's body — its equations traced inline (``ir.trace.OpBody``), or the
body of the ``jit`` equation a staged call made — is *inlined*: its primitives are bound one by one (nested ``jit``
calls inlined too; ``compile.lowering.bodies``), and JAX linearizes plain primitives instead of tracing and
partially evaluating one sub-jaxpr per op, and emits one MLIR function instead of one per op.
Everything that does not depend on the traced values — which inputs need a redistribution pin, each pin's
``NamedSharding``, each node's scope label, each node's body key — is worked out once per evaluation, before the
first bind (``compile.lowering.pins.prepare``), so the evaluation loop here only binds. A body that two or more
nodes compute (the same equations, pins included: ``bodies.BodyKeys``) becomes one ``jax.jit`` function every such
node calls under its own named scope (:func:`shared_calls`): JAX caches a jit's linearization, transposition and
MLIR function by jaxpr, so a deep network's repeated layers are differentiated and emitted once per distinct body,
not once per node.
``custom_jvp``/``custom_vjp`` equations are re-bound whole with their bind params (keeping custom derivatives). Runs
of nodes marked for recomputation (``Cell.recompute()``, ``Primitive.recompute()``) are evaluated inside
``jax.checkpoint`` (``compile.recompute``), inline (as is everything when level-3 activations are named).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh

from graphpar.compile.lowering import call_groups, recompute
from graphpar.compile.lowering.pins import Pin, Step, prepare
from graphpar.ir.graph import Graph


def _pinned_body(step: Step) -> Callable[..., list[Any]]:
    """The step as one function of its inputs: input pins, body, output pins."""
    def graphpar_node(*xs: Any) -> list[Any]:
        return _evaluate_pinned(step, list(xs))

    return graphpar_node


def shared_calls(steps: Sequence[Step]) -> dict[Any, Callable[..., list[Any]]]:
    """One ``jax.jit`` function per body that two or more of ``steps`` compute (same :attr:`Step.share` key).

    Why: every node JAX differentiates and lowers costs it a trace per primitive (linearizing, transposing,
    emitting MLIR), and a deep network repeats the same few bodies hundreds of times (a 256-layer MLP: three). A
    ``jit`` call of one function object is traced once, and JAX caches its linearization, transposition and MLIR
    function by jaxpr, so those costs are paid once per distinct body; each call still runs under its node's named
    scope (``op_name`` of what XLA inlines keeps the call site's), and its pins are inside the call, so the
    partitioner sees the same layouts."""
    count: dict[Any, int] = {}
    first: dict[Any, Step] = {}
    for step in steps:
        if step.share is not None:
            count[step.share] = count.get(step.share, 0) + 1
            first.setdefault(step.share, step)
    return {key: jax.jit(_pinned_body(first[key])) for key, n in count.items() if n > 1}


def _pin(xs: list[Any], pins: tuple[Pin, ...], name_comm: bool) -> list[Any]:
    for k, sharding, where in pins:
        with jax.named_scope(where):  # "in0"/"out0": the execute dump tells redistributions of inputs apart
            xs[k] = _named(jax.lax.with_sharding_constraint(xs[k], sharding), name_comm)
    return xs


def run_step(step: Step, env: dict[int, Any], name_comm: bool = False, from_batch: set[int] | None = None,
             shared: dict[Any, Callable[..., list[Any]]] | None = None) -> None:
    """Evaluate one prepared node, reading its inputs from and writing its outputs to ``env``. ``from_batch``: the
    values computed from the batch so far, whose node outputs are named activations (the parallel optimizer's
    level3, ``compile.recompute.naming_activations``). ``shared``: :func:`shared_calls`; a step whose body is
    there is evaluated as a call of it."""
    node = step.node
    with jax.named_scope(node.label):
        xs = [env[v] for v in node.inputs]
        call = shared.get(step.share) if shared and not name_comm and from_batch is None else None
        if call is not None:
            env.update(zip(node.outputs, call(*xs)))
            return
        if step.in_pins:
            xs = _pin(xs, step.in_pins, name_comm)
        outs = step.body(xs)
        if step.out_pins:
            outs = _pin(list(outs), step.out_pins, False)
        if name_comm and step.communication:
            outs = [_named(o, True) for o in outs]
        if from_batch is not None and any(v in from_batch for v in node.inputs):
            from_batch.update(node.outputs)
            outs = [checkpoint_name(o, recompute.ACTIVATION) if jnp.issubdtype(o.dtype, jnp.inexact) else o
                    for o in outs]
    env.update(zip(node.outputs, outs))


def _evaluate_pinned(step: Step, xs: list[Any], out_pins: tuple[Pin, ...] | None = None) -> list[Any]:
    """The step's input pins, body and output pins (``out_pins``: default the step's own)."""
    out_pins = step.out_pins if out_pins is None else out_pins
    ys = _pin(xs, step.in_pins, False) if step.in_pins else xs
    outs = step.body(ys)
    return _pin(list(outs), out_pins, False) if out_pins else list(outs)


def _evaluate_member(step: Step, xs: list[Any]) -> list[Any]:
    """A group member: every output pinned (see ``compile.call_groups``)."""
    return _evaluate_pinned(step, xs, step.all_out_pins)


def run_group(group: call_groups.Group, env: dict[int, Any], functions: dict[Any, Callable[..., list[Any]]]) -> None:
    """Evaluate a :class:`~graphpar.compile.lowering.call_groups.Group` as a call of its key's shared function (made
    by the first group of that key), under the group's call-site scope."""
    fn = functions.get(group.share)
    if fn is None:
        fn = functions[group.share] = call_groups.group_function(group, _evaluate_member)
    with jax.named_scope(group.call_scope):
        outs = fn(*[env[v] for v in group.inputs])
    env.update(zip(group.outputs, outs))


def evaluate(graph: Graph, args: Sequence[Any], mesh: Mesh | None = None,
             vmapped_axes: frozenset[str] = frozenset()) -> list[Any]:
    """The graph's outputs for flat ``args`` (in ``graph.inputs`` order); with ``mesh``, layouts are pinned.

    ``vmapped_axes``: mesh axes a surrounding ``jax.vmap(spmd_axis_name=...)`` already splits over (gradient
    accumulation's per-replica step, ``compile.replica_split``); they are left out of every pinned layout."""
    steps = prepare(graph, mesh, vmapped_axes)
    env: dict[int, Any] = {vid: value.const for vid, value in graph.values.items() if value.kind == "const"}
    env.update(zip(graph.inputs, args))
    # level3 of the parallel optimizer: name the values computed from the batch (compile.recompute)
    from_batch = ({v for v in graph.inputs if graph.values[v].kind == "input"} if recompute.names_activations()
                  else None)
    segments = recompute.segments(graph)
    plain = [[steps[node.id] for node in nodes] for config, nodes in segments if config is None]
    # runs of nodes repeated as a whole: one shared call each; repeated single nodes: likewise (not when activations
    # are named: each node's outputs are named at its own call site)
    units = call_groups.plan_units(graph, plain) if from_batch is None else plain
    # a node outside the groups whose body others compute too is a shared call as it is without groups (counted
    # over every node: a call and an inline body can get different layouts from XLA)
    shared = shared_calls([s for seg in plain for s in seg]) if from_batch is None else {}
    group_fns: dict[Any, Callable[..., list[Any]]] = {}
    plain_units = iter(units)
    for config, nodes in segments:
        if config is None:
            for unit in next(plain_units):
                if isinstance(unit, call_groups.Group):
                    run_group(unit, env, group_fns)
                else:
                    run_step(unit, env, from_batch=from_batch, shared=shared)
        else:
            _run_checkpointed(graph, [steps[node.id] for node in nodes], config, env, from_batch)
    return [env[v] for v in graph.outputs]


def _named(x: Any, name_comm: bool) -> Any:
    return checkpoint_name(x, recompute.COMM) if name_comm else x


def _run_checkpointed(graph: Graph, steps: Sequence[Step], config: Any, env: dict[int, Any],
                      from_batch: set[int] | None = None) -> None:
    """Evaluate a run of recomputed nodes inside ``jax.checkpoint``: its inputs are the values it reads from
    outside (constants are closed over), its outputs those read after it."""
    nodes = [step.node for step in steps]
    inside = {v for node in nodes for v in node.outputs}
    ext = list(dict.fromkeys(v for node in nodes for v in node.inputs
                             if v not in inside and graph.values[v].kind != "const"))
    ids = {node.id for node in nodes}
    later = {v for node in graph.node_list() if node.id not in ids for v in node.inputs} | set(graph.outputs)
    needed = [v for node in nodes for v in node.outputs if v in later]
    consts = {v: env[v] for node in nodes for v in node.inputs if graph.values[v].kind == "const"}

    def segment(*args: Any) -> list[Any]:
        local = dict(consts)
        local.update(zip(ext, args))
        for step in steps:
            run_step(step, local, name_comm=not config.mp_comm_recompute, from_batch=from_batch)
        return [local[v] for v in needed]

    outs = jax.checkpoint(segment, policy=config.policy())(*[env[v] for v in ext])
    env.update(zip(needed, outs))
