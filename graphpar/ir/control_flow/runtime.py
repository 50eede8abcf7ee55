"""What the rewritten code calls (``control_flow.rewrite``): each helper checks whether its condition is concrete.

A concrete condition (a Python value, a NumPy or JAX array with a value) runs exactly the Python statement it
replaces: the branch taken runs, the other does not, truthiness is Python's (``bool(cond)``, with its usual error for
an array of several values), ``and``/``or`` short-circuit and return an operand. A traced condition (a value of the
program being compiled) runs both branches and merges them (``control_flow.merge``). A site is the tuple the
rewrite embedded, ``(file, line, text[, names, live names])`` (the names an ``if``'s branches bind, and those of
them read after it): it names the user's line in every refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from graphpar.errors import TracedControlFlowError
from graphpar.ir.control_flow import loop, merge


class _Undefined:
    """A name with no value (not yet bound before an ``if``, or bound by neither branch)."""

    def __repr__(self) -> str:
        return "<unbound>"


UNDEF = _Undefined()


def _truth(value: Any) -> bool | None:
    """Python's truthiness of ``value`` (its own errors included), or None when it is a traced value without one
    (a tracer under ``jax.grad`` of concrete inputs has one: its ``if`` runs as Python, as JAX's own does)."""
    try:
        return bool(value)
    except jax.errors.ConcretizationTypeError:
        return None


def folded(test: Callable[[], Any]) -> Any:
    """The value of a test, with operations on concrete operands evaluated now (``jax.ensure_compile_time_eval``):
    a test on constants alone (``self.keep_prob < 1.0``, a Cell's Tensor attribute) is concrete, so its statement
    runs as Python, as MindSpore's graph mode folds it while compiling (under ``jax.jit`` JAX would stage even an
    operation on constants). Operations on traced values are traced as they would be without it."""
    with jax.ensure_compile_time_eval():
        return test()


def where(site: tuple) -> str:
    return f"{site[0]}:{site[1]} (`{site[2]}`)"


def concrete(value: Any, site: tuple, reason: str) -> Any:
    """``value`` when it is concrete (the statement then runs as Python does); a traced one is refused by name.
    ``reason``: why the statement kept its Python form (``while:...`` for a loop)."""
    if not isinstance(value, jax.core.Tracer) or _truth(value) is not None:
        return value
    if reason.startswith("while:"):
        raise TracedControlFlowError(where(site), (
            f"a `while` loop on a traced value whose body {reason[6:]} is not compiled: graphpar compiles such a "
            "loop as one function of the names its body assigns (jax.lax.while_loop), so the body must end where "
            "the loop's body ends (`break` and `continue` are fine; `while ... else` is not compiled, as in "
            "MindSpore's graph mode). Assign the result in the body and use it after the loop"))
    raise TracedControlFlowError(where(site), (
        f"an `if` on a traced value whose branch {reason} is not compiled: graphpar compiles such an `if` by "
        "running both branches and choosing their values with the condition (jnp.where), so a branch must end "
        "where the `if` ends. Assign the result in both branches and use it after the `if` (return it there); "
        "a check that must stop the program belongs outside the compiled step"))


def predicate(cond: Any, site: tuple) -> jax.Array:
    """A traced condition as one boolean (Python's truthiness: nonzero), refused when it holds several values."""
    x = jnp.asarray(cond)
    if x.size != 1:
        raise TracedControlFlowError(where(site), (
            f"the condition is a traced Tensor of shape {tuple(x.shape)}; an `if` needs one value: reduce it "
            "(x.all(), x.any(), ops.ReduceAll) or choose element-wise with ops.Select()(cond, a, b)"))
    x = jnp.reshape(x, ())
    return x if x.dtype == jnp.bool_ else x != 0


def _read(getter: Callable[[], Any]) -> Any:
    try:
        return getter()
    except NameError:  # an unbound local (UnboundLocalError) or free variable
        return UNDEF


def bound(namespace: dict, names: tuple) -> tuple:
    """The values of ``names`` in a branch's ``locals()``, UNDEF for one it left unbound."""
    return tuple(namespace.get(n, UNDEF) for n in names)


def if_stmt(cond: Any, then_fn: Callable[..., tuple], else_fn: Callable[..., tuple],
            getters: Sequence[Callable[[], Any]], site: tuple) -> tuple:
    """``if cond: then else: else`` over the names the branches bind (their values in, their values out)."""
    values = [_read(g) for g in getters]
    truth = _truth(cond)
    if truth is not None:
        return (then_fn if truth else else_fn)(*values)
    return merge.both_branches(predicate(cond, site), then_fn, else_fn, values, site, UNDEF)


def if_exp(cond: Any, then_fn: Callable[[], Any], else_fn: Callable[[], Any], site: tuple) -> Any:
    """``then if cond else other``."""
    truth = _truth(cond)
    if truth is not None:
        return then_fn() if truth else else_fn()
    (value,) = merge.both_branches(predicate(cond, site), lambda: (then_fn(),), lambda: (else_fn(),), [],
                                   site + ((None,), (None,)), UNDEF)
    return value


def _chain(site: tuple, operands: tuple[Callable[[], Any], ...], stop_on: bool,
           combine: Callable[[Any, Any], Any]) -> Any:
    """Python's short-circuit chain over concrete operands (the first whose truth is ``stop_on`` is the value), and
    ``combine`` of the predicates from the first traced one on."""
    value = operands[0]()
    for i in range(1, len(operands)):
        truth = _truth(value)
        if truth is None:
            rest = _chain(site, operands[i:], stop_on, combine)
            rest_truth = _truth(rest)
            return combine(predicate(value, site), predicate(rest, site) if rest_truth is None else rest_truth)
        if truth == stop_on:
            return value
        value = operands[i]()
    return value


def and_(site: tuple, *operands: Callable[[], Any]) -> Any:
    """``a and b and ...`` in a test: Python's for concrete operands, ``logical_and`` from the first traced one."""
    return _chain(site, operands, False, jnp.logical_and)


def or_(site: tuple, *operands: Callable[[], Any]) -> Any:
    """``a or b or ...`` in a test: Python's for concrete operands, ``logical_or`` from the first traced one."""
    return _chain(site, operands, True, jnp.logical_or)


def not_(value: Any, site: tuple) -> Any:
    """``not value`` in a test."""
    truth = _truth(value)
    return jnp.logical_not(predicate(value, site)) if truth is None else not truth


def while_stmt(test_fn: Callable[..., Any], body_fn: Callable[..., tuple], getters: Sequence[Callable[[], Any]],
               site: tuple) -> tuple:
    """``while test: body`` over the names the body binds. Iterations whose test is concrete run as Python; from
    the first traced test on, the rest of the loop is one ``jax.lax.while_loop`` (``loop``)."""
    values = tuple(_read(g) for g in getters)
    while True:
        cond = test_fn(*values)
        truth = _truth(cond)
        if truth is None:
            return loop.traced_while(test_fn, body_fn, values, site, UNDEF, lambda c: predicate(c, site))
        if not truth:
            return values
        values = body_fn(*values)
