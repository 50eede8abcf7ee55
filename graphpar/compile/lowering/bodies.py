"""Node bodies for the lowering interpreter: binding a node's equations inline, and comparing two bodies.

An op node's body — its equations traced inline (``ir.trace.OpBody``), or the body of the ``jit`` equation a
staged call made — is evaluated by :func:`eval_inlined`: its primitives are bound one by one in the current trace
(nested ``jit`` calls inlined too), so JAX linearizes plain primitives instead of tracing and partially evaluating
one sub-jaxpr per op, and emits one MLIR function instead of one per op (``compile.lowering.interpret``).
:class:`BodyKeys` gives each body a structural key, equal for two bodies that compute the same function of their
inputs: the interpreter makes such bodies one shared ``jax.jit`` call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from graphpar.ir.control_flow import loop
from graphpar.ir.graph import Graph, Node

CALL_PRIMS = frozenset({"jit", "pjit", "closed_call", "core_call"})


def eval_inlined(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    """``jaxpr``'s outputs for ``args``, binding its primitives in the current trace with every plain call
    (``jit``/``closed_call``) inlined, so autodiff and lowering see primitives only."""
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
    env.update((v, x) for v, x in zip(jaxpr.invars, args) if not isinstance(v, jcore.Literal))  # see OpBody
    for eqn in jaxpr.eqns:
        ins = [a.val if isinstance(a, jcore.Literal) else env[a] for a in eqn.invars]
        prim = eqn.primitive
        if prim.name in CALL_PRIMS:
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


def node_body(node: Node) -> Callable[[Sequence[Any]], list[Any]]:
    if node.body is not None:  # an op traced inline: its equations
        body = node.body
        return lambda xs: eval_inlined(body, (), xs)
    eqn = node.eqn
    prim = eqn.primitive
    if node.is_op or prim.name in CALL_PRIMS:
        inner = eqn.params.get("jaxpr") or eqn.params["call_jaxpr"]
        jaxpr, consts = (inner.jaxpr, inner.consts) if isinstance(inner, jcore.ClosedJaxpr) else (inner, ())
        return lambda xs: eval_inlined(jaxpr, consts, xs)
    params = prim.get_bind_params(eqn.params)

    def bind(xs: Sequence[Any]) -> list[Any]:
        with eqn.ctx.manager:
            out = prim.bind(*xs, **params)
        return list(out) if prim.multiple_results else [out]

    return loop.reverse_refused(eqn, bind) if prim.name == "while" else bind


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
        """The key of what :func:`node_body` evaluates for ``node``; None when it cannot be compared, or reads a
        constant (kept one: never made an argument of a shared call)."""
        if any(graph.values[v].kind == "const" for v in node.inputs):
            return None
        try:
            if node.body is not None:
                body = node.body
                return self.eqns(body.invars, body.eqns, body.outvars)
            eqn = node.eqn
            if node.is_op or eqn.primitive.name in CALL_PRIMS:  # staged: the inner jaxpr, whatever the name
                inner = eqn.params.get("jaxpr") or eqn.params["call_jaxpr"]
                return ("call", self.param("jaxpr", inner, eqn), tuple(v.aval for v in eqn.invars))
            return self.eqns(eqn.invars, [eqn], eqn.outvars)
        except _Unshared:
            return None
