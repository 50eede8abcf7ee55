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
calls inlined too), and JAX linearizes plain primitives instead of tracing and partially evaluating one sub-jaxpr
per op, and emits one MLIR function instead of one per op.
Everything that does not depend on the traced values — which inputs need a redistribution pin, each pin's
``NamedSharding``, each node's scope label, each node's body key — is worked out once per evaluation, before the
first bind (:func:`prepare`), so the evaluation loop only binds. A body that two or more nodes compute (the same
equations, pins included: :class:`BodyKeys`) becomes one ``jax.jit`` function every such node calls under its own
named scope (:func:`shared_calls`): JAX caches a jit's linearization, transposition and MLIR function by jaxpr, so a
deep network's repeated layers are differentiated and emitted once per distinct body, not once per node.
``custom_jvp``/``custom_vjp`` equations are re-bound whole with their bind params (keeping custom derivatives). Runs
of nodes marked for recomputation (``Cell.recompute()``, ``Primitive.recompute()``) are evaluated inside
``jax.checkpoint`` (``compile.recompute``), inline (as is everything when level-3 activations are named).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.extend import core as jcore
from jax.sharding import Mesh, NamedSharding

from graphpar.compile.lowering import recompute
from graphpar.compile.lowering import call_groups
from graphpar.ir.graph import Graph, Node
from graphpar.planner.strategy import to_partition_spec

_CALL_PRIMS = frozenset({"jit", "pjit", "closed_call", "core_call"})

Pin = tuple[int, NamedSharding, str]  # (position, layout, named scope "in0"/"out0")


def eval_inlined(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    """``jaxpr``'s outputs for ``args``, binding its primitives in the current trace with every plain call
    (``jit``/``closed_call``) inlined, so autodiff and lowering see primitives only."""
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
    env.update((v, x) for v, x in zip(jaxpr.invars, args) if not isinstance(v, jcore.Literal))  # see OpBody
    for eqn in jaxpr.eqns:
        ins = [a.val if isinstance(a, jcore.Literal) else env[a] for a in eqn.invars]
        prim = eqn.primitive
        if prim.name in _CALL_PRIMS:
            inner = eqn.params.get("jaxpr") or eqn.params["call_jaxpr"]
            if isinstance(inner, jcore.ClosedJaxpr):
                outs = eval_inlined(inner.jaxpr, inner.consts, ins)
            else:
                outs = eval_inlined(inner, (), ins)
        else:
            with eqn.ctx.manager:
                out = prim.bind(*ins, **prim.get_bind_params(eqn.params))
            outs = out if prim.multiple_results else [out]
        env.update(zip(eqn.outvars, outs))
    return [a.val if isinstance(a, jcore.Literal) else env[a] for a in jaxpr.outvars]


def _body(node: Node) -> Callable[[Sequence[Any]], list[Any]]:
    if node.body is not None:  # an op traced inline: its equations
        body = node.body
        return lambda xs: eval_inlined(body, (), xs)
    eqn = node.eqn
    prim = eqn.primitive
    if node.is_op or prim.name in _CALL_PRIMS:
        inner = eqn.params.get("jaxpr") or eqn.params["call_jaxpr"]
        jaxpr, consts = (inner.jaxpr, inner.consts) if isinstance(inner, jcore.ClosedJaxpr) else (inner, ())
        return lambda xs: eval_inlined(jaxpr, consts, xs)
    params = prim.get_bind_params(eqn.params)

    def bind(xs: Sequence[Any]) -> list[Any]:
        with eqn.ctx.manager:
            out = prim.bind(*xs, **params)
        return list(out) if prim.multiple_results else [out]

    return bind


class _Unshared(Exception):
    """A body holds something two bodies cannot be compared by (an unhashable param)."""


class BodyKeys:
    """Structural keys of node bodies: equal for two equation lists exactly when they compute the same function of
    their inputs — each equation's primitive, bind params (nested jaxprs compared by structure), context and result
    types, and where each operand comes from (an input position, an earlier result, a literal's value). A
    ``custom_jvp`` call is compared by its primal and its JVP jaxpr (JAX memoizes the latter, the linearization
    reads it again); a ``custom_jvp`` call inside a JVP jaxpr by its primal only: its own rule matters to a second
    derivative only, and the step differentiates once (relu's JVP calls relu: keying that rule too never ends).
    Nested jaxprs are keyed once per object."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, bool], tuple[Any, Any]] = {}  # (id(jaxpr), in a JVP) -> (jaxpr, key)
        self._in_jvp = False

    def eqns(self, invars: Sequence[Any], eqns: Sequence[Any], outvars: Sequence[Any]) -> tuple:
        index: dict[Any, int] = {}

        def ref(atom: Any) -> Any:
            if isinstance(atom, jcore.Literal):  # a scalar: its bytes and type (repr of a numpy scalar is slow)
                return ("literal", np.asarray(atom.val).tobytes(), atom.aval)
            return index[atom]

        ins = [ref(v) if isinstance(v, jcore.Literal) else index.setdefault(v, len(index)) for v in invars]
        parts: list[Any] = [tuple(ins), tuple(v.aval for v in invars)]
        for eqn in eqns:
            params = tuple((k, self.param(k, v, eqn)) for k, v in sorted(eqn.params.items()))
            c = eqn.ctx
            parts.append((eqn.primitive, params, tuple(ref(a) for a in eqn.invars), tuple(v.aval for v in eqn.outvars),
                          frozenset(eqn.effects), c.compute_type, c.threefry_partitionable, repr(c.xla_metadata),
                          c.cur_abstract_mesh))
            for v in eqn.outvars:
                index[v] = len(index)
        parts.append(tuple(ref(a) for a in outvars))
        return tuple(parts)

    def jaxpr(self, jaxpr: Any) -> tuple:
        memo = (id(jaxpr), self._in_jvp)
        found = self._memo.get(memo)
        if found is None:
            found = self._memo[memo] = (jaxpr, self.eqns([*jaxpr.constvars, *jaxpr.invars], jaxpr.eqns,
                                                               jaxpr.outvars))
        return found[1]

    def consts(self, consts: Sequence[Any]) -> tuple:
        return tuple(self.param("const", c, None) for c in consts)

    def param(self, name: str, value: Any, eqn: Any) -> Any:
        if isinstance(value, jcore.ClosedJaxpr):
            return ("closed", self.jaxpr(value.jaxpr), self.consts(value.consts))
        if isinstance(value, jcore.Jaxpr):
            return ("open", self.jaxpr(value))
        if isinstance(value, (tuple, list)):
            return (type(value).__name__, *(self.param(name, v, eqn) for v in value))
        if name == "jvp_jaxpr_fun" and eqn is not None and eqn.primitive.name == "custom_jvp_call":
            if self._in_jvp:
                return "jvp of a jvp"
            jaxpr, consts, out_zeros = value.call_wrapped(*[False] * (len(eqn.invars) - eqn.params["num_consts"]))
            self._in_jvp = True
            try:
                return ("jvp", self.eqns([*jaxpr.constvars, *jaxpr.invars], jaxpr.eqns, jaxpr.outvars),
                        self.consts(consts), tuple(out_zeros))
            finally:
                self._in_jvp = False
        if isinstance(value, (np.ndarray, jax.Array)):
            return ("array", id(value))  # the same constant object only (the graph keeps it alive)
        try:
            hash(value)
        except TypeError:
            raise _Unshared(name) from None
        return value

    def node(self, graph: Graph, node: Node) -> tuple | None:
        """The key of what :func:`_body` evaluates for ``node``; None when it cannot be compared, or reads a
        constant (kept one: never made an argument of a shared call)."""
        if any(graph.values[v].kind == "const" for v in node.inputs):
            return None
        try:
            if node.body is not None:
                body = node.body
                return self.eqns(body.invars, body.eqns, body.outvars)
            eqn = node.eqn
            if node.is_op or eqn.primitive.name in _CALL_PRIMS:  # staged: the inner jaxpr, whatever the name
                inner = eqn.params.get("jaxpr") or eqn.params["call_jaxpr"]
                return ("call", self.param("jaxpr", inner, eqn), tuple(v.aval for v in eqn.invars))
            return self.eqns(eqn.invars, [eqn], eqn.outvars)
        except _Unshared:
            return None


@dataclass(frozen=True)
class Step:
    """One node, ready to evaluate: its body, the pins around it, whether its outputs are communication.
    ``share``: equal for two steps that compute the same function of their inputs, pins included (None: never
    shared; see :func:`shared_calls`)."""

    node: Node
    body: Callable[[Sequence[Any]], list[Any]]
    in_pins: tuple[Pin, ...]
    out_pins: tuple[Pin, ...]
    communication: bool
    share: Any = None
    all_out_pins: tuple[Pin, ...] = ()  # out_pins and the pins of implied outputs (inside a group call)


def prepare(graph: Graph, mesh: Mesh | None, vmapped_axes: frozenset[str] = frozenset()) -> dict[int, Step]:
    """Each node's :class:`Step` (by node id). With ``mesh``, an input is pinned only where its layout changes (a
    redistribution; elsewhere the producer's output pin or the storage layout already holds) and every output is
    pinned to its planned layout, less the ``vmapped_axes`` (see :func:`evaluate`)."""
    shardings: dict[Any, NamedSharding] = {}

    def sharding(spec: Any) -> NamedSharding:
        found = shardings.get(spec)
        if found is None:
            kept = tuple(tuple(a for a in axes if a not in vmapped_axes) for axes in spec) if vmapped_axes else spec
            found = shardings[spec] = NamedSharding(mesh, to_partition_spec(kept))
        return found

    layout: dict[int, Any] = dict(graph.meta.get("value_specs", {})) if mesh is not None else {}
    implied = implied_outputs(graph) if mesh is not None else frozenset()
    steps: dict[int, Step] = {}
    keys = BodyKeys()
    for node in graph.node_list():
        strategy = node.strategy if mesh is not None else None
        in_pins: list[Pin] = []
        out_pins: list[Pin] = []
        all_out: list[Pin] = []
        if strategy is not None:
            for i, v in enumerate(node.inputs):
                spec = strategy.input_spec(i)
                if spec is not None and layout.get(v) != spec and graph.values[v].is_array:
                    in_pins.append((i, sharding(spec), f"in{i}"))
            for j, v in enumerate(node.outputs):
                spec = strategy.output_spec(j)
                layout[v] = spec
                if spec is not None and graph.values[v].is_array:
                    all_out.append((j, sharding(spec), f"out{j}"))
                    if v not in implied:
                        out_pins.append(all_out[-1])
        body_key = keys.node(graph, node)
        share = None if body_key is None else (body_key, tuple(in_pins), tuple(out_pins), tuple(all_out))
        steps[node.id] = Step(node, _body(node), tuple(in_pins), tuple(out_pins), recompute.is_communication(node),
                              share, tuple(all_out))
    return steps


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


def _follows_input(graph: Graph, node: Node) -> bool:
    """An elementwise node whose one output has the labels and shape of one of its inputs, with no reduction, no
    communication and no layout override: its output layout is its inputs' layout, which is what XLA's sharding
    propagation gives it from its (pinned) operands."""
    s = node.strategy
    if (s is None or s.in_override is not None or s.out_override is not None or len(node.outputs) != 1
            or s.dims.contracted or recompute.is_communication(node)):
        return False
    out, shape = s.dims.outputs[0], graph.values[node.outputs[0]].shape
    return any(labels == out and graph.values[v].shape == shape for labels, v in zip(s.dims.inputs, node.inputs))


def implied_outputs(graph: Graph) -> frozenset[int]:
    """Outputs whose pin is implied by the pins around them, so they are left unpinned.

    An output of an elementwise node (:func:`_follows_input`) all of whose consumers are elementwise nodes of the
    same recompute run that take it, and give their output, in its own layout and shape: its operands are pinned
    (or storage layouts) and every path from it ends at a pin of the same layout through elementwise ops only, so
    XLA's propagation can give it no other layout, forward or backward (a chain of elementwise ops keeps its
    last pin). Each pin is an equation JAX linearizes, transposes and lowers: a ReLU after a bias add after a
    matmul needs one, not three."""
    run = {node.id: k for k, (_, nodes) in enumerate(recompute.segments(graph)) for node in nodes}
    follows = {node.id: _follows_input(graph, node) for node in graph.node_list()}
    outputs = set(graph.outputs)
    implied: set[int] = set()
    for node in graph.node_list():
        if not follows[node.id]:
            continue
        v = node.outputs[0]
        value, spec = graph.values[v], node.strategy.output_spec(0)
        if v in outputs or not value.consumers or any(n not in graph.nodes for n, _ in value.consumers):
            continue  # a result, unused, or read by another graph (a pipeline stage's sent value): pinned
        consumers = graph.consumers(v)
        if all(follows[c.id] and run[c.id] == run[node.id] and c.strategy.input_spec(k) == spec
               and c.strategy.output_spec(0) == spec and graph.values[c.outputs[0]].shape == value.shape
               for c, k in consumers):
            implied.add(v)
    return frozenset(implied)


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
    """Evaluate a :class:`~graphpar.compile.lowering.call_groups.Group` as a call of its key's shared function (made by the
    first group of that key), under the group's call-site scope."""
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
