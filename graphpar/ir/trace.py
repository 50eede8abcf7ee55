"""Trace a function of Cells into the graph IR.

``trace(fn, args, arg_kinds)`` runs ``fn`` once under ``jax.make_jaxpr`` with a
:class:`~graphpar.ir.recorder.TraceRecorder` active, then walks the ClosedJaxpr once.

Op calls are traced inline: each runs under the named scope ``graphpar_op_{id}``, so its equations carry the
marker in their name stack, and the recorder keeps the call's input and output tracers. ``fn``'s traced form
returns those tracers as extra results, which is how their jaxpr variables are known (the extra results are cut
off the graph's jaxpr). A run of equations whose outermost marker is one call becomes that call's op node: its
inputs are the call's tensor inputs, its outputs the call's outputs, its body the equations in between. Tracing
inline costs a fraction of staging every call as its own ``jit`` (0.13 against 0.8 ms per small op), and the
lowering binds the body's primitives directly.

A call the recorder staged as a ``jit`` equation named ``graphpar_op_{id}`` (see ``graphpar.ops.primitive``) becomes
the op node recorded for that call. Any other ``jit`` (those ``jnp`` functions make internally) is inlined, so its
equations become raw nodes, and every other equation becomes one raw node (``custom_jvp_call``/``custom_vjp_call``
stay whole, keeping their custom derivatives). If the inline calls cannot be delimited exactly (an op called inside
a transformation in ``construct`` — ``jax.vmap``, ``lax.scan`` — or one that reads a value it was not given), the
function is traced again with every call staged, as a ``jit`` equation.

Raw nodes take their Cell scope from the equation's name stack (Cells push named scopes while tracing).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from graphpar.errors import GraphparError
from graphpar.ir.graph import Graph, Node, Value
from graphpar.ir.recorder import OP_EQN_PREFIX, TraceRecorder, recording

_JIT_PRIMS = ("jit", "pjit", "closed_call", "core_call")
_REMAT_PRIMS = ("checkpoint", "remat2")  # jax.checkpoint's equation
_REMATTED = "rematted_computation"  # JAX's name for the forward a checkpoint's backward recomputes
_WRAPPER = re.compile(r"^(?:[a-z_]+\()+(.*?)\)+$")
_TRANSPOSED = re.compile(r"(?:^|/)transpose\(")
_MARKER = re.compile(r"(?:^|/)" + OP_EQN_PREFIX + r"(\d+)(?:/|$)")


class InlineTraceError(Exception):
    """The inline op calls of a trace cannot be delimited exactly (the trace is redone with every call staged)."""


@dataclass(frozen=True)
class OpBody:
    """The equations of an op traced inline, as a jaxpr without constants: ``invars`` are the call's tensor inputs
    (a variable may repeat: ``Add(x, x)``), ``outvars`` its outputs. ``compile.interpret`` evaluates it."""

    invars: tuple[Any, ...]
    eqns: tuple[Any, ...]
    outvars: tuple[Any, ...]
    constvars: tuple[Any, ...] = ()


def _marker(eqn: Any) -> int | None:
    """The id of the outermost op call whose named scope the equation was traced in."""
    m = _MARKER.search(str(eqn.source_info.name_stack))
    return int(m.group(1)) if m else None


def clean_scope(name_stack: str) -> str:
    """``transpose(jvp(Default))/_backbone-Net`` → ``Default/_backbone-Net``."""
    parts = []
    for seg in str(name_stack).split("/"):
        m = _WRAPPER.match(seg)
        seg = m.group(1) if m else seg
        if seg:
            parts.append(seg)
    return "/".join(parts)


class _Builder:
    def __init__(self, recorder: TraceRecorder, delimiters: dict[int, tuple[list[Any], list[Any]]] | None = None):
        self.recorder = recorder
        self.delimiters = delimiters or {}  # inline call id -> (input atoms, output atoms)
        self.values: dict[int, Value] = {}
        self.nodes: dict[int, Node] = {}
        self.order: list[int] = []
        self._next_value = 0
        self._next_node = 0
        self._next_remat = 0
        self.remat: int | None = None  # the backward recomputation being walked (Node.remat of its nodes)
        self.arity: dict[int, tuple[int, int]] = {}  # staged op call id -> (inputs, outputs) of its forward call

    def new_value(self, aval: Any, kind: str, name: str = "", const: Any = None) -> int:
        vid = self._next_value
        self._next_value += 1
        shape = tuple(getattr(aval, "shape", ()))
        dtype = getattr(aval, "dtype", np.float32)
        try:
            dtype = np.dtype(dtype)
        except TypeError:  # extended dtypes (PRNG keys) stay as JAX gives them
            pass
        self.values[vid] = Value(vid, shape, dtype, kind, name, const=const)
        return vid

    def read(self, env: dict, atom: Any) -> int:
        if isinstance(atom, jcore.Literal):
            return self.new_value(jax.typeof(atom.val), "const", const=atom.val)
        return env[atom]

    def add_node(self, eqn: Any, kind: str, instance: str, scope: str, attrs: dict, hint: Any, out_hint: Any,
                 in_ids: list[int], is_op: bool, input_names: tuple = (), static_args: dict | None = None,
                 body: OpBody | None = None, debug_name: str = "") -> Node:
        nid = self._next_node
        self._next_node += 1
        out_ids = []
        for var in (eqn.outvars if body is None else body.outvars):
            vid = self.new_value(var.aval, "op")
            self.values[vid].producer = nid
            out_ids.append(vid)
        for k, vid in enumerate(in_ids):
            self.values[vid].consumers.append((nid, k))
        node = Node(nid, kind, instance, scope, attrs, hint, out_hint, list(in_ids), out_ids, eqn, is_op,
                    input_names, dict(static_args or {}), body=body, remat=self.remat, debug_name=debug_name)
        self.nodes[nid] = node
        self.order.append(nid)
        return node

    def inline_op(self, call_id: int, eqns: list[Any], env: dict) -> Node:
        """The op node of an inline call from its run of equations, checked to be exactly delimited."""
        call = self.recorder.calls[call_id]
        ins, outs = self.delimiters[call_id]
        defined = {v for eqn in eqns for v in eqn.outvars}
        for atom in ins:
            if not isinstance(atom, jcore.Literal) and atom not in env:
                raise InlineTraceError(f"{call.instance_name}: an input is not defined before the op")
        known = defined | {a for a in ins if not isinstance(a, jcore.Literal)}
        for eqn in eqns:
            if any(not isinstance(a, jcore.Literal) and a not in known for a in eqn.invars):
                raise InlineTraceError(f"{call.instance_name}: reads a value it was not given")
        for atom, tracer in zip(outs, call.outputs):
            if isinstance(atom, jcore.Literal) or atom not in defined or atom.aval != jax.typeof(tracer):
                raise InlineTraceError(f"{call.instance_name}: an output is not computed by the op")
        in_ids = [self.read(env, a) for a in ins]
        body = OpBody(tuple(ins), tuple(eqns), tuple(outs))
        node = self.add_node(None, call.kind, call.instance_name, call.scope, call.attrs, call.in_strategy,
                             call.out_strategy, in_ids, True, call.input_names, call.static_args, body,
                             call.debug_name)
        for var, vid in zip(outs, node.outputs):
            env[var] = vid
        return node

    def walk(self, jaxpr: Any, env: dict, scope_prefix: str = "", transposed: bool = False) -> None:
        eqns = jaxpr.eqns
        k = 0
        while k < len(eqns):
            eqn = eqns[k]
            marker = _marker(eqn) if self.recorder.inline else None
            if marker is not None:
                if scope_prefix:  # an op called inside a function jitted in construct
                    raise InlineTraceError(f"op call {marker} inside a nested call")
                end = k + 1
                while end < len(eqns) and _marker(eqns[end]) == marker:
                    end += 1
                run, k = list(eqns[k:end]), end
                if marker in self.delimiters:
                    self.inline_op(marker, run, env)
                elif marker not in self.recorder.calls:
                    raise InlineTraceError(f"equations of op call {marker} without a record")
                # else: a call computed inline, then staged as a jit (its outputs could not delimit it): these
                # equations are dead, their results unused (a later read fails and the trace is redone staged)
                continue
            self.walk_eqn(eqn, env, scope_prefix, transposed)
            k += 1

    def walk_eqn(self, eqn: Any, env: dict, scope_prefix: str, transposed: bool = False) -> None:
        in_ids = [self.read(env, a) for a in eqn.invars]
        prim = eqn.primitive.name
        scope = clean_scope("/".join(s for s in (scope_prefix, str(eqn.source_info.name_stack)) if s))
        if prim in _REMAT_PRIMS:
            self.walk_remat(eqn, in_ids, env, scope)
            return
        if prim in _JIT_PRIMS:
            name = str(eqn.params.get("name", ""))
            # a staged op's transpose (a GradOperation inside construct) keeps the op's name: it is the op's
            # backward, computed by JAX, not a call of the op: its equations are walked as raw ones (inside a
            # checkpoint's backward, every equation but the recomputed forward's is the transpose)
            stack = str(eqn.source_info.name_stack)
            if transposed:
                backward = _REMATTED not in stack
            else:
                backward = bool(_TRANSPOSED.search(stack))
            call_id = int(name[len(OP_EQN_PREFIX):]) if name.startswith(OP_EQN_PREFIX) else None
            arity = (len(eqn.invars), len(eqn.outvars))
            if call_id is not None and not backward and self.remat is None:
                self.arity[call_id] = arity
            # a recomputed op whose unused outputs or inputs JAX pruned is no longer the op: walked raw
            if call_id is not None and not backward and self.arity.get(call_id, arity) == arity:
                call = self.recorder.calls[call_id]
                node = self.add_node(eqn, call.kind, call.instance_name, call.scope, call.attrs,
                                     call.in_strategy, call.out_strategy, in_ids, True, call.input_names,
                                     call.static_args, debug_name=call.debug_name)
            else:
                inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
                inner_jaxpr = inner.jaxpr if isinstance(inner, jcore.ClosedJaxpr) else inner
                consts = inner.consts if isinstance(inner, jcore.ClosedJaxpr) else ()
                inner_env: dict = {}
                for var, c in zip(inner_jaxpr.constvars, consts):
                    inner_env[var] = self.new_value(jax.typeof(c), "const", const=c)
                for var, vid in zip(inner_jaxpr.invars, in_ids):
                    inner_env[var] = vid
                self.walk(inner_jaxpr, inner_env, scope or "/", transposed and _REMATTED not in stack)
                for var, outer in zip(inner_jaxpr.outvars, eqn.outvars):
                    env[outer] = self.read(inner_env, var)
                return
        else:
            attrs = {k: v for k, v in eqn.params.items() if not k.endswith("jaxpr") and k != "jvp_jaxpr_fun"}
            if prim in ("custom_jvp_call", "custom_vjp_call"):
                attrs["name"] = _custom_name(eqn)
            node = self.add_node(eqn, prim, prim, scope, attrs, None, None, in_ids, False)
        for var, vid in zip(eqn.outvars, node.outputs):
            env[var] = vid


    def walk_remat(self, eqn: Any, in_ids: list[int], env: dict, scope: str) -> None:
        """A ``jax.checkpoint`` equation, walked into nodes like a ``jit``: the backward of a Cell recomputed under a
        gradient taken in ``construct`` (``nn._recompute.checkpointed``), whose recomputed forward ops become op
        nodes the planner gives their rules, and the transposes raw nodes. Its nodes carry one ``Node.remat`` id,
        so the lowering evaluates them as one checkpoint again (XLA must not merge the recomputation with the
        forward pass). Not in a backward (a gradient that never reached it), it is a plain call."""
        inner = eqn.params["jaxpr"]
        inner_jaxpr = inner.jaxpr if isinstance(inner, jcore.ClosedJaxpr) else inner
        inner_env: dict = {}
        for var, c in zip(inner_jaxpr.constvars, inner.consts if isinstance(inner, jcore.ClosedJaxpr) else ()):
            inner_env[var] = self.new_value(jax.typeof(c), "const", const=c)
        for var, vid in zip(inner_jaxpr.invars, in_ids):
            inner_env[var] = vid
        backward = bool(_TRANSPOSED.search(str(eqn.source_info.name_stack)))
        outer = self.remat
        if backward:
            self.remat, self._next_remat = self._next_remat, self._next_remat + 1
        try:
            self.walk(inner_jaxpr, inner_env, scope or "/", transposed=backward)
        finally:
            self.remat = outer
        for var, out in zip(inner_jaxpr.outvars, eqn.outvars):
            env[out] = self.read(inner_env, var)


def _custom_name(eqn: Any) -> str:
    inner = eqn.params.get("call_jaxpr")
    if inner is None:
        return "custom"
    info = (inner.jaxpr if isinstance(inner, jcore.ClosedJaxpr) else inner).debug_info
    return (info.func_name if info is not None else "") or "custom"


def drop_jax_frames_note(err: BaseException) -> None:
    """Remove the note JAX appends to an exception that crossed its API boundary ("For simplicity, JAX has removed
    its internal frames ..."): a graphpar error names the op, scope and fix in one line, and that line should end
    the traceback the user reads."""
    notes = vars(err).get("__notes__")
    if notes:
        notes[:] = [n for n in notes if "JAX has removed its internal frames" not in n]
        if not notes:
            del err.__notes__


def trace(fn: Callable[..., Any], args: Sequence[Any], arg_kinds: Sequence[tuple[str, str]],
          name: str = "graph", axis_env: Sequence[tuple[str, int]] | None = None, staged: bool = False,
          defer_input_checks: bool = False) -> Graph:
    """Trace ``fn(*args)`` into a :class:`Graph`.

    ``arg_kinds`` gives ``(kind, name)`` for each leaf of ``args`` in flatten order (``("param", "fc1.weight")``,
    ``("input", "input0")``, ...). ``axis_env`` binds named axes (the data-parallel replica axis) for collectives.
    ``staged=True`` stages every op call as its own ``jit`` equation (the reference the inline trace equals).
    ``defer_input_checks``: the caller makes the runtime checks of batch inputs itself (``Graph.input_checks``;
    ``ir.recorder.TraceRecorder``), so ops leave them out of the graph.
    """
    if staged:
        return _trace(fn, args, arg_kinds, name, axis_env, False, defer_input_checks)
    try:
        return _trace(fn, args, arg_kinds, name, axis_env, True, defer_input_checks)
    except InlineTraceError:
        return _trace(fn, args, arg_kinds, name, axis_env, False, defer_input_checks)


def _trace(fn: Callable[..., Any], args: Sequence[Any], arg_kinds: Sequence[tuple[str, str]], name: str,
           axis_env: Sequence[tuple[str, int]] | None, inline: bool, defer_input_checks: bool) -> Graph:
    n_out = [0]
    with recording(inline=inline, defer_input_checks=defer_input_checks) as recorder:
        def traced(*a: Any) -> tuple[list[Any], list[Any]]:
            recorder.batch_inputs = [x for x, (kind, _) in zip(jax.tree.leaves(a), arg_kinds) if kind == "input"]
            outs = jax.tree.leaves(fn(*a))
            n_out[0] = len(outs)
            extra = []
            for call in recorder.calls.values():
                if call.outputs is not None:
                    extra.extend(call.tensors)
                    extra.extend(call.outputs)
            return outs, extra

        try:
            closed = jax.make_jaxpr(traced, axis_env=axis_env)(*args)
        except GraphparError as err:
            drop_jax_frames_note(err)
            raise
    jaxpr, n = closed.jaxpr, n_out[0]
    delimiters: dict[int, tuple[list[Any], list[Any]]] = {}
    pos = n
    for call in recorder.calls.values():
        if call.outputs is not None:
            ins = list(jaxpr.outvars[pos:pos + len(call.tensors)])
            pos += len(call.tensors)
            delimiters[call.call_id] = (ins, list(jaxpr.outvars[pos:pos + len(call.outputs)]))
            pos += len(call.outputs)
    if delimiters:
        if any(isinstance(c, jax.core.Tracer) for c in closed.consts):  # a tracer of a nested transformation
            raise InlineTraceError("an op was called inside a transformation")
        info = jaxpr.debug_info
        if info is not None and info.result_paths is not None:
            info = info._replace(result_paths=tuple(info.result_paths)[:n])
        # replace() keeps the constants paired with their variables: jax >= 0.12 merged ClosedJaxpr into Jaxpr,
        # where a Jaxpr built from constvars without their values takes them as leading invars.
        closed = closed.replace(jaxpr=jaxpr.replace(outvars=jaxpr.outvars[:n], debug_info=info))
        jaxpr = closed.jaxpr
    builder = _Builder(recorder, delimiters)
    env: dict = {}
    for var, c in zip(jaxpr.constvars, closed.consts):
        env[var] = builder.new_value(jax.typeof(c), "const", const=c)
    if len(arg_kinds) != len(jaxpr.invars):
        raise ValueError(f"trace(): {len(arg_kinds)} argument kinds for {len(jaxpr.invars)} jaxpr inputs")
    inputs = []
    for var, (kind, vname) in zip(jaxpr.invars, arg_kinds):
        vid = builder.new_value(var.aval, kind, vname)
        env[var] = vid
        inputs.append(vid)
    try:
        builder.walk(jaxpr, env)
        outputs = [builder.read(env, v) for v in jaxpr.outvars]
    except KeyError as exc:  # a later equation reads a value private to an inline op
        raise InlineTraceError(f"a value inside an op is read outside it ({exc})") from None
    return Graph(closed, builder.values, builder.nodes, builder.order, inputs, outputs, name,
                 recompute_scopes=dict(recorder.recompute_scopes), input_checks=tuple(recorder.input_checks),
                 inner_gradient=recorder.gradient_taken)
