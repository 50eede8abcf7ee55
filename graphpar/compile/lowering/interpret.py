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
Everything that does not depend on the traced values — each node's pins and their ``NamedSharding``, its body and
body key, the repeated runs of nodes that are one call, the recomputed runs, the shared-call table — is a
:class:`~graphpar.compile.lowering.plan.LoweringPlan`, worked out once per planned graph (``compile.lowering.plan``),
so :func:`run` only binds: it reads and writes one environment of values unit by unit, as ``jax.core.eval_jaxpr``
does equation by equation. A body that two or more nodes compute (the same equations, pins included:
``bodies.BodyKeys``) is one ``jax.jit`` function every such node calls under its own named scope, and a repeated
run of nodes one function every such run calls (``compile.lowering.call_groups``): JAX caches a jit's
linearization, transposition and MLIR function by jaxpr, so a deep network's repeated layers are differentiated and
emitted once per distinct body, not once per node.
``custom_jvp``/``custom_vjp`` equations are re-bound whole with their bind params (keeping custom derivatives). Runs
of nodes marked for recomputation (``Cell.recompute()``, ``Primitive.recompute()``) are evaluated inside
``jax.checkpoint`` (``compile.recompute``), inline (as is everything when level-3 activations are named).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh

from graphpar.compile.lowering import call_groups, recompute
from graphpar.compile.lowering.channels_last import to_written
from graphpar.compile.lowering.call_groups import Group
from graphpar.compile.lowering.pins import Pin, Step
from graphpar.compile.lowering.plan import Checkpointed, LoweringPlan, lowering_plan
from graphpar.ir.graph import Graph


@dataclass(frozen=True)
class Overrides:
    """What one data-parallel replica's evaluation of a planned graph changes (``compile.plans.replica_split``):
    ``combine``: value id -> a function the value passes through once computed (a batch reduction made global);
    ``consts``: value id -> the constant to use instead (the whole batch's); ``bodies``: node id -> the body to
    bind instead of the node's own (a BatchNorm whose statistics cover every replica)."""

    combine: Mapping[int, Callable[[Any], Any]] = field(default_factory=dict)
    consts: Mapping[int, Any] = field(default_factory=dict)
    bodies: Mapping[int, Callable[[Sequence[Any]], list[Any]]] = field(default_factory=dict)

    def step(self, step: Step) -> Step:
        body = self.bodies.get(step.node.id)
        return step if body is None else dataclasses.replace(step, body=body)


def run(plan: LoweringPlan, args: Sequence[Any], overrides: Overrides | None = None) -> list[Any]:
    """The planned graph's outputs for flat ``args`` (in its inputs' order): each unit of ``plan`` bound in order,
    reading its inputs from and writing its outputs to one environment of values (with ``overrides``)."""
    o = overrides or Overrides()
    env: dict[int, Any] = dict(plan.consts)
    env.update(o.consts)
    env.update(zip(plan.inputs, args))
    functions: dict[tuple[str, Any], Callable[..., list[Any]]] = {}  # this trace's jit functions, made on first use
    member = _evaluate_member if not o.bodies else (lambda step, xs: _evaluate_member(o.step(step), xs))
    for unit in plan.units:
        xs = [env[v] for v in unit.inputs]
        if isinstance(unit, Group):  # the function of its key, made from the first group of that key
            fn = functions.get(("group", unit.share))
            if fn is None:
                fn = functions[("group", unit.share)] = call_groups.group_function(unit, member)
            with jax.named_scope(unit.call_scope):
                outs = fn(*xs)
        elif isinstance(unit, Checkpointed):
            outs = _run_checkpointed(unit, plan, xs, o)
        elif unit.node.id in o.bodies:
            outs = bind_step(o.step(unit), xs, named=unit.node.id in plan.named)
        elif unit.share in plan.calls:  # a shared call: the pinned body of the table's step for its key
            fn = functions.get(("node", unit.share))
            if fn is None:
                fn = functions[("node", unit.share)] = jax.jit(_pinned_body(plan.calls[unit.share]))
            with jax.named_scope(unit.node.label):
                outs = fn(*xs)
        else:
            outs = bind_step(unit, xs, named=unit.node.id in plan.named)
        env.update(zip(unit.outputs, outs))
        for v in unit.outputs if o.combine else ():
            if v in o.combine:
                env[v] = o.combine[v](env[v])
    if plan.output_perms:  # values the channels-last pass holds permuted leave in the layout the user wrote
        return [to_written(env[v], p) for v, p in zip(plan.outputs, plan.output_perms)]
    return [env[v] for v in plan.outputs]


def evaluate(graph: Graph, args: Sequence[Any], mesh: Mesh | None = None,
             vmapped_axes: frozenset[str] = frozenset(), channels_last: bool = False,
             overrides: Overrides | None = None) -> list[Any]:
    """The graph's outputs for flat ``args`` (in ``graph.inputs`` order); with ``mesh``, layouts are pinned:
    :func:`run` over the graph's lowering plan (made on its first lowering and kept: ``plan.lowering_plan``).

    ``vmapped_axes``: mesh axes a surrounding ``jax.vmap(spmd_axis_name=...)`` already splits over (gradient
    accumulation's per-replica step, ``compile.replica_split``); they are left out of every pinned layout.
    ``channels_last``: convolutions and the ops between them run channels-last (``compile.lowering.channels_last``;
    the execution plan decides from ``set_context(format_transform=...)`` and the platform). ``overrides``: see
    :class:`Overrides` (its ``combine`` values in :func:`combinable`)."""
    plan = lowering_plan(graph, mesh, vmapped_axes, recompute.names_activations(), channels_last)
    if overrides is not None and not set(overrides.combine) <= combinable(plan):
        raise ValueError(f"graphpar: values {sorted(set(overrides.combine) - combinable(plan))} are computed "
                         "inside a repeated run of ops")
    return run(plan, args, overrides)


def combinable(plan: LoweringPlan) -> set[int]:
    """The values :func:`run`'s ``combine`` can reach: outputs of units and of the steps of recomputed runs (not
    the values inside a repeated run, which is one function every repetition calls)."""
    out = {v for unit in plan.units for v in unit.outputs}
    out.update(v for unit in plan.units if isinstance(unit, Checkpointed) for step in unit.steps for v in step.outputs)
    return out


def _pinned_body(step: Step) -> Callable[..., list[Any]]:
    """The step as one function of its inputs: input pins, body, output pins (a shared call's function)."""
    def graphpar_node(*xs: Any) -> list[Any]:
        return _evaluate_pinned(step, list(xs))

    return graphpar_node


def _pin(xs: list[Any], pins: tuple[Pin, ...], name_comm: bool) -> list[Any]:
    for k, sharding, where in pins:
        with jax.named_scope(where):  # "in0"/"out0": the execute dump tells redistributions of inputs apart
            xs[k] = _named(jax.lax.with_sharding_constraint(xs[k], sharding), name_comm)
    return xs


def bind_step(step: Step, xs: list[Any], name_comm: bool = False, named: bool = False) -> list[Any]:
    """One node inline under its named scope: input pins, body, output pins. ``name_comm``: its communication
    (pinned redistributions of its inputs, its outputs when it communicates) is named ``recompute.COMM``, for a
    recomputed run that keeps it; ``named``: its outputs are named activations (the parallel optimizer's level3,
    ``compile.recompute.naming_activations``)."""
    with jax.named_scope(step.node.label):
        if step.in_pins:
            xs = _pin(xs, step.in_pins, name_comm)
        outs = step.body(xs)
        if step.out_pins:
            outs = _pin(list(outs), step.out_pins, False)
        if name_comm and step.communication:
            outs = [_named(o, True) for o in outs]
        if named:
            outs = [checkpoint_name(o, recompute.ACTIVATION) if jnp.issubdtype(o.dtype, jnp.inexact) else o
                    for o in outs]
    return outs


def _evaluate_pinned(step: Step, xs: list[Any], out_pins: tuple[Pin, ...] | None = None) -> list[Any]:
    """The step's input pins, body and output pins (``out_pins``: default the step's own)."""
    out_pins = step.out_pins if out_pins is None else out_pins
    ys = _pin(xs, step.in_pins, False) if step.in_pins else xs
    outs = step.body(ys)
    return _pin(list(outs), out_pins, False) if out_pins else list(outs)


def _evaluate_member(step: Step, xs: list[Any]) -> list[Any]:
    """A group member: every output pinned (see ``compile.call_groups``)."""
    return _evaluate_pinned(step, xs, step.all_out_pins)


def _named(x: Any, name_comm: bool) -> Any:
    return checkpoint_name(x, recompute.COMM) if name_comm else x


def _run_checkpointed(unit: Checkpointed, plan: LoweringPlan, xs: list[Any], o: Overrides) -> list[Any]:
    """A run of recomputed nodes inside ``jax.checkpoint``: its steps bound inline, the constants they read closed
    over (``o``: see :func:`run`)."""
    consts = dict(unit.consts)
    consts.update((v, c) for v, c in o.consts.items() if v in consts)
    name_comm = not unit.config.mp_comm_recompute
    named = {v for step in unit.steps if step.node.id in plan.named for v in step.outputs}

    def segment(*args: Any) -> list[Any]:
        local = dict(consts)
        local.update(zip(unit.inputs, args))
        for step in unit.steps:
            local.update(zip(step.outputs, bind_step(o.step(step), [local[v] for v in step.inputs], name_comm)))
            for v in step.outputs if o.combine else ():
                if v in o.combine:
                    local[v] = o.combine[v](local[v])
        return [local[v] for v in unit.outputs]

    if unit.recomputes:
        xs = jax.lax.optimization_barrier(list(xs))
    outs = jax.checkpoint(segment, policy=unit.config.policy())(*xs)
    # named activations (level3, a pipeline stage's forward): the run's outputs are, what it computes inside is
    # not (named inside, the outer checkpoint's policy would save them and the run would recompute nothing)
    return [checkpoint_name(x, recompute.ACTIVATION) if v in named and jnp.issubdtype(x.dtype, jnp.inexact) else x
            for v, x in zip(unit.outputs, outs)]
