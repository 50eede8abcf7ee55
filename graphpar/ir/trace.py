"""Trace a function of Cells into the graph IR.

``trace(fn, args, arg_kinds)`` runs ``fn`` under ``jax.make_jaxpr`` with a :class:`~graphpar.ir.recorder.TraceRecorder`
active, then walks the ClosedJaxpr once:

* a ``jit`` equation named ``graphpar_op_{id}`` becomes the op node recorded for that call;
* any other ``jit`` (those ``jnp`` functions make internally) is inlined, so its equations become raw nodes;
* every other equation becomes one raw node (``custom_jvp_call``/``custom_vjp_call`` stay whole, keeping their
  custom derivatives).

Raw nodes take their Cell scope from the equation's name stack (Cells push named scopes while tracing).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from graphpar.ir.graph import Graph, Node, Value
from graphpar.ir.recorder import OP_EQN_PREFIX, TraceRecorder, recording

_JIT_PRIMS = ("jit", "pjit", "closed_call", "core_call")
_WRAPPER = re.compile(r"^(?:[a-z_]+\()+(.*?)\)+$")


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
    def __init__(self, recorder: TraceRecorder):
        self.recorder = recorder
        self.values: dict[int, Value] = {}
        self.nodes: dict[int, Node] = {}
        self.order: list[int] = []
        self._next_value = 0
        self._next_node = 0

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
            return self.new_value(jax.typeof(atom.val) if hasattr(atom, "val") else atom.aval, "const",
                                  const=atom.val)
        return env[atom]

    def add_node(self, eqn: Any, kind: str, instance: str, scope: str, attrs: dict, hint: Any, out_hint: Any,
                 in_ids: list[int], is_op: bool, input_names: tuple = (), static_args: dict | None = None) -> Node:
        nid = self._next_node
        self._next_node += 1
        out_ids = []
        for var in eqn.outvars:
            vid = self.new_value(var.aval, "op")
            self.values[vid].producer = nid
            out_ids.append(vid)
        for k, vid in enumerate(in_ids):
            self.values[vid].consumers.append((nid, k))
        node = Node(nid, kind, instance, scope, attrs, hint, out_hint, list(in_ids), out_ids, eqn, is_op,
                    input_names, dict(static_args or {}))
        self.nodes[nid] = node
        self.order.append(nid)
        return node

    def walk(self, jaxpr: Any, env: dict, scope_prefix: str = "") -> None:
        for eqn in jaxpr.eqns:
            in_ids = [self.read(env, a) for a in eqn.invars]
            prim = eqn.primitive.name
            scope = clean_scope("/".join(s for s in (scope_prefix, str(eqn.source_info.name_stack)) if s))
            if prim in _JIT_PRIMS:
                name = str(eqn.params.get("name", ""))
                if name.startswith(OP_EQN_PREFIX):
                    call = self.recorder.calls[int(name[len(OP_EQN_PREFIX):])]
                    node = self.add_node(eqn, call.kind, call.instance_name, call.scope, call.attrs,
                                         call.in_strategy, call.out_strategy, in_ids, True, call.input_names,
                                         call.static_args)
                else:
                    inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
                    inner_jaxpr = inner.jaxpr if hasattr(inner, "jaxpr") else inner
                    inner_env: dict = {}
                    for var, c in zip(inner_jaxpr.constvars, getattr(inner, "consts", ())):
                        inner_env[var] = self.new_value(jax.typeof(c), "const", const=c)
                    for var, vid in zip(inner_jaxpr.invars, in_ids):
                        inner_env[var] = vid
                    self.walk(inner_jaxpr, inner_env, scope)
                    for var, outer in zip(inner_jaxpr.outvars, eqn.outvars):
                        env[outer] = self.read(inner_env, var)
                    continue
            else:
                attrs = {k: v for k, v in eqn.params.items() if not k.endswith("jaxpr") and k != "jvp_jaxpr_fun"}
                if prim in ("custom_jvp_call", "custom_vjp_call"):
                    attrs["name"] = _custom_name(eqn)
                node = self.add_node(eqn, prim, prim, scope, attrs, None, None, in_ids, False)
            for var, vid in zip(eqn.outvars, node.outputs):
                env[var] = vid


def _custom_name(eqn: Any) -> str:
    inner = eqn.params.get("call_jaxpr")
    info = getattr(getattr(inner, "jaxpr", inner), "debug_info", None)
    return getattr(info, "func_name", "") or "custom"


def trace(fn: Callable[..., Any], args: Sequence[Any], arg_kinds: Sequence[tuple[str, str]],
          name: str = "graph", axis_env: Sequence[tuple[str, int]] | None = None) -> Graph:
    """Trace ``fn(*args)`` into a :class:`Graph`.

    ``arg_kinds`` gives ``(kind, name)`` for each leaf of ``args`` in flatten order (``("param", "fc1.weight")``,
    ``("input", "input0")``, ...). ``axis_env`` binds named axes (the data-parallel replica axis) for collectives.
    """
    with recording() as recorder:
        closed = jax.make_jaxpr(fn, axis_env=axis_env)(*args)
    builder = _Builder(recorder)
    env: dict = {}
    jaxpr = closed.jaxpr
    for var, c in zip(jaxpr.constvars, closed.consts):
        env[var] = builder.new_value(jax.typeof(c), "const", const=c)
    if len(arg_kinds) != len(jaxpr.invars):
        raise ValueError(f"trace(): {len(arg_kinds)} argument kinds for {len(jaxpr.invars)} jaxpr inputs")
    inputs = []
    for var, (kind, vname) in zip(jaxpr.invars, arg_kinds):
        vid = builder.new_value(var.aval, kind, vname)
        env[var] = vid
        inputs.append(vid)
    builder.walk(jaxpr, env)
    outputs = [builder.read(env, v) for v in jaxpr.outvars]
    meta = {"recompute_scopes": dict(recorder.recompute_scopes)} if recorder.recompute_scopes else {}
    return Graph(closed, builder.values, builder.nodes, builder.order, inputs, outputs, name, meta)
