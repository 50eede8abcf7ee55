"""Both branches of an ``if`` on a traced value, run one after the other and merged with ``jnp.where``.

A branch is a function of the names the ``if`` binds (``control_flow.rewrite``); besides those it may write state:
the Variables of the Cells it reaches (Parameters an optimizer updates, a loss scaler's ``scale_value`` and
``counter``, BatchNorm statistics) and state kept outside Variables by an object that says how to read and write it
(:class:`BranchState`: an optimizer's optax state). What a branch reaches is found as ``graphpar.jit`` finds a step's
state (``ir.free_variables.reach``): through the branch's free variables (closure cells, the globals its code names,
default arguments, a bound method's object), into functions, ``functools.partial``, lists, tuples and dicts; a Cell's
whole tree is collected (``nnx.iter_graph``), a plain object is not entered. The state is read before the ``if``;
the ``then`` branch runs; what it wrote is read and the state put back; the ``else`` branch runs and is read in
turn; then every value either branch wrote, and every name, is ``jnp.where(cond, then_value, else_value)``.

Why ``jnp.where`` (if-conversion) and not ``lax.cond``: the branches write Python-side state (a Parameter's value,
an optimizer's state) by side effect, which ``lax.cond`` cannot carry out of its branch functions without this same
read-run-read bookkeeping; graphpar's planner sees one flat graph, where ``select_n`` is an element-wise op with a
sharding rule (a ``cond`` is opaque to it, its branches unplanned); and the typical branch (``optimizer(grads)`` when
the gradients are finite, a loss-scale update) is element-wise work that costs little next to the forward and
backward it follows, while a ``cond`` would keep XLA from fusing it and, under SPMD, synchronise the devices on the
predicate. The price: both branches always run, and under ``grad`` a non-finite value in the branch not taken still
reaches the gradient of ``where`` as ``0 * inf``. Python objects a branch mutates in place (``list.append``) see
both branches' mutations: merge values by assigning names.

Refused by name (file:line of the ``if``): values of different shapes or dtypes for one name or one piece of state,
different Python values (strings, Cells, None against a Tensor), and a name bound in one branch only, unbound before
the ``if`` and read after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphpar.common.parameter import Parameter
from graphpar.errors import TracedControlFlowError
from graphpar.ir.free_variables import reach


@runtime_checkable
class BranchState(Protocol):
    """State an object (a Cell) keeps outside Variables, which a branch may write: ``nn.Optimizer``'s optax state."""

    def branch_state(self) -> Any:
        """The state's current value (a pytree of arrays, or None)."""
        ...

    def set_branch_state(self, value: Any) -> None:
        """Write the state."""
        ...

    def initial_branch_state(self) -> Any:
        """The value the state takes when it is first made (for the path that did not make it), not kept."""
        ...


@dataclass(frozen=True)
class _Slot:
    """One piece of state a branch may write: how to read and write it, and how messages name it."""

    label: str
    read: Callable[[], Any]
    write: Callable[[Any], None]
    initial: Callable[[], Any] | None = None  # the value on a path that did not make the state (it read None)
    variable: nnx.Variable | None = None  # the Variable it reads and writes (a loop lends it to its body's trace)


def _variable_slot(var: nnx.Variable, label: str) -> _Slot:
    name = var.name if isinstance(var, Parameter) else label
    return _Slot(f"Parameter '{name}'" if isinstance(var, Parameter) else f"state '{name}'",
                 lambda: var._raw_value, lambda value: object.__setattr__(var, "_raw_value", value), variable=var)


def _module_slots(module: nnx.Module) -> Iterator[tuple[int, _Slot]]:
    owner = type(module).__name__
    for path, node in nnx.iter_graph(module):
        if isinstance(node, nnx.Variable):
            yield id(node), _variable_slot(node, ".".join([owner, *map(str, path)]))
        elif isinstance(node, nnx.Module) and isinstance(node, BranchState):
            label = f"the state of {type(node).__name__} '{'.'.join([owner, *map(str, path)])}'"
            yield id(node), _Slot(label, node.branch_state, node.set_branch_state, node.initial_branch_state)


def reachable_slots(roots: Sequence[Any]) -> list[_Slot]:
    """The state reachable from ``roots`` (see the module docstring), each piece once, in the order reached: a
    Cell's whole tree, a Variable outside one; a bound method leads to its object (``free_variables.reach``)."""
    slots: dict[int, _Slot] = {}
    reached = reach(roots, lambda obj: isinstance(obj, (nnx.Module, nnx.Variable)), method_attributes=False)
    for obj in reached.objects:
        if isinstance(obj, nnx.Module):
            for key, slot in _module_slots(obj):
                slots.setdefault(key, slot)
        else:
            slots.setdefault(id(obj), _variable_slot(obj, type(obj).__name__))
    return list(slots.values())


def _describe(value: Any) -> str:
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return f"{jnp.result_type(value)}{list(np.shape(value))}"
    text = repr(value)
    return text if len(text) <= 40 else f"a {type(value).__name__}"


def _array_like(value: Any) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, np.generic, bool, int, float, complex))


def _python_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, complex))


def same_value(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # a comparison that is not a plain bool (arrays, objects refusing ==): not the same
        return False


def _choose(pred: jax.Array, then_value: Any, else_value: Any, what: str, where: str, state: bool) -> Any:
    """``jnp.where(pred, then_value, else_value)`` leaf by leaf, or a refusal naming ``what``."""
    if then_value is else_value:
        return then_value
    fix = ("write values of the same shape and dtype in both branches" if state else
           "give it values of the same kind (Tensors of one shape and dtype) in both branches")
    t_leaves, t_tree = jax.tree.flatten(then_value)
    e_leaves, e_tree = jax.tree.flatten(else_value)
    if t_tree != e_tree:
        raise TracedControlFlowError(where, f"{what} is {_describe(then_value)} after the `if` branch and "
                                     f"{_describe(else_value)} after the `else` branch; a compiled `if` on a traced "
                                     f"value chooses between values of one structure: {fix}")
    out = []
    for t, e in zip(t_leaves, e_leaves):
        if t is e:
            out.append(t)
            continue
        if _array_like(t) and _array_like(e):
            same_dtype = jnp.result_type(t) == jnp.result_type(e) or (
                not state and (_python_scalar(t) or _python_scalar(e)))  # a Python number takes the Tensor's
            if np.shape(t) == np.shape(e) and same_dtype:
                out.append(jnp.where(pred, t, e))
                continue
        elif same_value(t, e):
            out.append(t)
            continue
        raise TracedControlFlowError(where, f"{what} is {_describe(t)} after the `if` branch and {_describe(e)} "
                                     f"after the `else` branch; a compiled `if` on a traced value chooses between "
                                     f"Tensors of one shape and dtype (or equal Python values): {fix}")
    return jax.tree.unflatten(t_tree, out)


def both_branches(pred: jax.Array, then_fn: Callable[..., tuple], else_fn: Callable[..., tuple],
                  values: Sequence[Any], site: tuple, undef: Any) -> tuple:
    """Run both branches on ``values`` and merge (see the module docstring); ``site`` is
    ``(file, line, text, names, live names)``."""
    where = f"{site[0]}:{site[1]} (`{site[2]}`)"
    names, live = site[3], site[4]
    slots = reachable_slots([then_fn, else_fn, *values])
    before = [slot.read() for slot in slots]
    try:
        then_out = then_fn(*values)
        then_state = [slot.read() for slot in slots]
        for slot, value in zip(slots, before):
            slot.write(value)
        else_out = else_fn(*values)
        else_state = [slot.read() for slot in slots]
    finally:
        for slot, value in zip(slots, before):
            slot.write(value)
    for slot, old, t, e in zip(slots, before, then_state, else_state):
        if t is not old or e is not old:
            if slot.initial is not None and (t is None) != (e is None):  # one path made the state, the other not
                t, e = (slot.initial() if t is None else t), (slot.initial() if e is None else e)
            slot.write(_choose(pred, t, e, slot.label, where, state=True))
    out = []
    for name, t, e in zip(names, then_out, else_out):
        what = "the value of the conditional expression" if name is None else f"`{name}`"
        if t is undef or e is undef:
            if (t is undef) != (e is undef) and name in live:
                branch = "`if`" if e is undef else "`else`"
                raise TracedControlFlowError(where, (
                    f"{what} is bound in the {branch} branch only and has no value before the `if`, but it is "
                    f"read after it; a compiled `if` on a traced value needs a value on both paths: assign "
                    f"`{name}` before the `if`, or in both branches"))
            out.append(undef)  # bound on neither path, or only read inside its branch: unbound after the if
            continue
        out.append(_choose(pred, t, e, what, where, state=False))
    return tuple(out)
