"""A ``while`` loop on a traced value, compiled as one ``jax.lax.while_loop`` over what its body writes.

MindSpore's graph mode compiles a ``while`` whose test is a Tensor as a loop in the graph: the names the body assigns
keep one type (a Tensor keeps its shape and dtype), and a name first bound inside the body cannot be read after the
loop. graphpar's rewrite (``control_flow.rewrite``) makes the test and the body two functions of the names the body
binds (``break``/``continue`` lowered into flags, ``syntax.lower_jumps``); from the first traced test on,
:func:`traced_while` runs the rest of the loop as ``jax.lax.while_loop`` whose carry is:

* each name the body binds that has a value before the loop: its array leaves (a Parameter read into a name is
  carried as its value); its other leaves (strings, Cells, None, Python numbers) must come out of the body as they
  went in, except that a Python number the body changes (``i += 1``) is carried as a 0-d array;
* the state the body writes: the Variables of the Cells its free variables reach (a Parameter it ``set_value``\\ s,
  BatchNorm statistics) and ``BranchState`` (an optimizer's state), found as an ``if``'s branches' state is found
  (``merge.reachable_slots``). Only what the body writes is carried (so the planner sees the Parameters the body
  only reads as the loop's constants): the body is traced once, and traced again when it wrote state or changed a
  Python number that the carry did not hold yet.

The state is put back after each trace of the test and the body; the loop's results are written to it after the
loop. Refused by name at the loop's file:line (``TracedControlFlowError``): a name whose shape, dtype, structure or
Python value the body changes; a name first bound in the body and read after the loop; a test of several values.

Gradients: JAX differentiates a ``while_loop`` forward but not in reverse mode (its trip count is known only at run
time, so there is no tape to run backwards), where MindSpore's graph mode differentiates the loop it unrolls at run
time. :func:`reverse_refused` gives the lowering a binding of a ``while`` equation whose reverse-mode derivative
raises ``TracedControlFlowError`` naming the user's loop, when the loop's result reaches what is differentiated
(a loop in a differentiated function whose inputs do not depend on the weights is fine).
"""

from __future__ import annotations

import linecache
import os
import sysconfig
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.nnx import tracers

from graphpar.errors import TracedControlFlowError
from graphpar.ir.control_flow import merge


class _Again(Exception):
    """The body wrote state or changed a Python number the carry does not hold: trace the loop again with them."""

    def __init__(self, scalars: set[tuple[int, int]], slots: set[int]):
        super().__init__("retrace")
        self.scalars, self.slots = scalars, slots


def _is_leaf(value: Any) -> bool:
    return isinstance(value, nnx.Variable)


def _array(value: Any) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, np.generic, nnx.Variable))


def _scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, complex))


def _value(leaf: Any) -> Any:
    return jnp.asarray(leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf)


def _describe(value: Any) -> str:
    if isinstance(value, nnx.Variable):
        value = value.get_value()
    if _array(value):
        return f"{jnp.result_type(value)}{list(np.shape(value))}"
    text = repr(value)
    return text if len(text) <= 40 else f"a {type(value).__name__}"


def _refuse(where: str, what: str, before: Any, after: Any) -> TracedControlFlowError:
    return TracedControlFlowError(where, (
        f"{what} is {_describe(before)} before the loop and {_describe(after)} after its body; a compiled `while` "
        "on a traced value carries values of one kind through its iterations (Tensors of one shape and dtype, "
        "Python values the body leaves as they are): give it one shape and dtype before the loop and in the body"))


def traced_while(test_fn: Callable[..., Any], body_fn: Callable[..., tuple], values: tuple, site: tuple, undef: Any,
                 predicate: Callable[[Any], jax.Array]) -> tuple:
    """The rest of ``while test: body`` as one ``jax.lax.while_loop`` (see the module docstring): the names'
    values after the loop (``undef`` for a name bound only inside the body); ``site`` is
    ``(file, line, text, names, live names)``; ``predicate`` makes the test one boolean."""
    where = f"{site[0]}:{site[1]} (`{site[2]}`)"
    names, live = site[3], site[4]
    for name, value in zip(names, values):
        if value is undef and name in live:
            raise TracedControlFlowError(where, (
                f"`{name}` is bound in the loop's body and has no value before the loop, but it is read after it; "
                f"a compiled `while` on a traced value carries the names bound before it (MindSpore's graph mode "
                f"refuses this too): assign `{name}` before the loop"))
    slots = merge.reachable_slots([test_fn, body_fn, *values])
    before = [slot.read() for slot in slots]
    scalars: set[tuple[int, int]] = set()
    carried: set[int] = set()
    while True:
        try:
            out_values, out_state = _loop(test_fn, body_fn, values, names, where, undef, predicate, slots, before,
                                          scalars, sorted(carried))
            break
        except _Again as again:
            scalars |= again.scalars
            carried |= again.slots
        finally:
            for slot, value in zip(slots, before):
                slot.write(value)
    for j, value in out_state.items():
        slots[j].write(value)
    return out_values


def _loop(test_fn: Callable[..., Any], body_fn: Callable[..., tuple], values: tuple, names: tuple, where: str,
          undef: Any, predicate: Callable[[Any], jax.Array], slots: list, before: list,
          scalars: set[tuple[int, int]], carried: list[int]) -> tuple[tuple, dict[int, Any]]:
    """One trace of the loop with ``scalars`` and the slots ``carried`` in its carry; raises ``_Again`` when the
    body changes more."""
    flat = [None if v is undef else jax.tree.flatten(v, is_leaf=_is_leaf) for v in values]

    def dynamic(i: int, k: int, leaf: Any) -> bool:
        return _array(leaf) or (i, k) in scalars

    init_names = [_value(leaf) for i, f in enumerate(flat) if f is not None
                  for k, leaf in enumerate(f[0]) if dynamic(i, k, leaf)]
    init_state = []
    for j in carried:
        value = before[j]
        init_state.append(slots[j].initial() if value is None and slots[j].initial is not None else value)

    def rebuild(carry_names: Sequence[Any]) -> list[Any]:
        it = iter(carry_names)
        out = []
        for i, f in enumerate(flat):
            if f is None:
                out.append(undef)
                continue
            leaves = [next(it) if dynamic(i, k, leaf) else leaf for k, leaf in enumerate(f[0])]
            out.append(jax.tree.unflatten(f[1], leaves))
        return out

    variables = [slot.variable for slot in slots if slot.variable is not None]
    owners = [v._trace_state for v in variables]

    def lend(state: Sequence[Any]) -> None:
        """The carried state's values in the slots, and the Variables writable from the loop's trace (flax
        refuses a write from a trace other than the one that made the Variable's owner)."""
        for v in variables:
            object.__setattr__(v, "_trace_state", tracers.TraceState())
        for j, value in zip(carried, state):
            slots[j].write(value)

    def restore() -> None:
        for slot, value in zip(slots, before):
            slot.write(value)
        for v, owner in zip(variables, owners):
            object.__setattr__(v, "_trace_state", owner)

    def cond(carry: tuple) -> jax.Array:
        lend(carry[1])
        try:
            return predicate(test_fn(*rebuild(carry[0])))
        finally:
            restore()

    def body(carry: tuple) -> tuple:
        lend(carry[1])
        try:
            out = body_fn(*rebuild(carry[0]))
            state = [slot.read() for slot in slots]
        finally:
            restore()
        again_slots = {j for j, (now, old) in enumerate(zip(state, before)) if j not in carried and now is not old}
        again_scalars: set[tuple[int, int]] = set()
        new_names = []
        for i, f in enumerate(flat):
            if f is None:
                continue
            what = f"`{names[i]}`"
            if out[i] is undef:
                raise TracedControlFlowError(where, f"{what} is unbound after the loop's body; a compiled `while` on "
                                             "a traced value needs every name it carries bound after each iteration")
            leaves, tree = jax.tree.flatten(out[i], is_leaf=_is_leaf)
            if tree != f[1]:
                raise _refuse(where, what, values[i], out[i])
            for k, (old, new) in enumerate(zip(f[0], leaves)):
                if dynamic(i, k, old):
                    new_names.append(_checked(new, carry[0][len(new_names)], where, what, old))
                elif new is not old and not merge.same_value(old, new):
                    if not (_scalar(old) and (_scalar(new) or _array(new))):
                        raise _refuse(where, what, old, new)
                    again_scalars.add((i, k))
        if again_slots or again_scalars:
            raise _Again(again_scalars, again_slots)
        new_state = []
        for j, old in zip(carried, carry[1]):
            new = state[j]
            if jax.tree.structure(new) != jax.tree.structure(old):
                raise _refuse(where, slots[j].label, old, new)
            new_state.append(jax.tree.map(lambda n, o, label=slots[j].label: _checked(n, o, where, label, o),
                                          new, old))
        return new_names, new_state

    out_names, out_state = jax.lax.while_loop(cond, body, (init_names, init_state))
    return tuple(rebuild(out_names)), dict(zip(carried, out_state))


def _checked(new: Any, carried: Any, where: str, what: str, old: Any) -> Any:
    """``new`` as the next value of a carried leaf, or a refusal when its shape (or a fixed dtype) changed."""
    if not (_array(new) or _scalar(new)):
        raise _refuse(where, what, old, new)
    new = _value(new)
    weak = _scalar(old) or jax.typeof(carried).weak_type
    if new.shape != np.shape(carried) or (not weak and new.dtype != jnp.result_type(carried)):
        raise _refuse(where, what, carried, new)
    return new


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives: graphpar itself, the standard library, installed packages."""
    paths = sysconfig.get_paths()
    dirs = {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    dirs.update(os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    return tuple(sorted(d.rstrip(os.sep) + os.sep for d in dirs))


_LIBRARY_DIRS = _library_dirs()


def users_file(filename: str) -> bool:
    """Whether code in ``filename`` is the user's: not graphpar's, the standard library's or an installed
    package's, nor typed at a prompt."""
    return not filename.startswith("<") and not os.path.abspath(filename).startswith(_LIBRARY_DIRS)


def user_site(eqn: Any) -> str | None:
    """The user's line that made ``eqn`` (``file:line (`text`)``: the innermost frame of its traceback outside
    graphpar, JAX, the standard library and installed packages), or None."""
    traceback = eqn.source_info.traceback
    for frame in traceback.frames if traceback is not None else ():
        name = frame.file_name
        if users_file(name):
            return f"{name}:{frame.line_num} (`{linecache.getline(name, frame.line_num).strip()}`)"
    return None


def reverse_refused(eqn: Any, bind: Callable[[Sequence[Any]], list[Any]]) -> Callable[[Sequence[Any]], list[Any]]:
    """``bind`` (the binding of a ``while`` equation) with a reverse-mode derivative that refuses by name (see the
    module docstring); ``bind`` itself when the loop has no user's line to name."""
    where = user_site(eqn)
    if where is None:
        return bind

    @jax.custom_vjp
    def loop(*xs: Any) -> tuple:
        return tuple(bind(xs))

    def forward(*xs: Any) -> tuple:
        return tuple(bind(xs)), None

    def backward(_: Any, cotangents: Any) -> tuple:
        raise TracedControlFlowError(where, (
            "a `while` loop on a traced value is differentiated in reverse mode here: JAX differentiates a "
            "jax.lax.while_loop only forward, since its number of iterations is known only at run time. Loop a "
            "fixed number of times (for i in range(n), with a Python int n) and choose values with "
            "ops.Select()(cond, a, b), or compute the loop outside the differentiated function"))

    loop.defvjp(forward, backward)
    return lambda xs: list(loop(*xs))
