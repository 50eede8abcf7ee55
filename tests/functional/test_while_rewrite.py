"""A ``while`` on a traced value, on plain functions (``graphpar.ir.control_flow``): with a concrete test the
rewritten loop is Python's loop; with a traced one (``jax.jit``) it is one ``jax.lax.while_loop`` over the names its
body assigns and computes what Python computes on the same values, ``break`` and ``continue`` included; what
MindSpore's graph mode refuses, or a loop cannot carry, is refused at the user's line."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graphpar.errors import TracedControlFlowError
from graphpar.ir.control_flow import for_trace


def doubling(x):
    """A counter (a Python int the body changes) and a Tensor, carried."""
    n = 0
    while x.sum() < 10:
        x = x * 2
        n += 1
    return x, n


def skipping(x, limit):
    """``break`` on a traced value, ``continue`` on a counter, a name only the body uses (``step``)."""
    i = 0
    total = jnp.zeros_like(x)
    while i < limit:
        i = i + 1
        if x.sum() > 100:
            break
        if i % 2 == 0:
            continue
        step = x * 1
        total = total + step
        x = x * 2
    return total, x, i


def until(x):
    """``while True`` left by a ``break`` on a traced value."""
    while True:
        x = x + 1
        if x.sum() > 7:
            break
    return x


def nested(x):
    """A traced loop inside a traced loop's body."""
    outer = 0
    while x.sum() < 100:
        y = x
        while y.max() < 5:
            y = y + 1
        x = x + y
        outer += 1
    return x, outer


CASES = [(doubling, (np.ones(2, np.float32),)), (doubling, (np.full(2, 20.0, np.float32),)),
         (nested, (np.array([0.5, 1.0], np.float32),)),
         (skipping, (np.ones(2, np.float32), 9)), (skipping, (np.full(2, 30.0, np.float32), 9)),
         (until, (np.ones(2, np.float32),))]


@pytest.mark.parametrize("fn,args", CASES, ids=[f"{f.__name__}-{i}" for i, (f, _) in enumerate(CASES)])
def test_a_traced_loop_computes_what_python_computes(fn, args):
    expected = fn(*args)
    concrete = for_trace(fn)(*args)  # concrete tests: Python's loop, line for line
    traced = jax.jit(for_trace(fn))(*args)
    for e, c, t in zip(jax.tree.leaves(expected), jax.tree.leaves(concrete), jax.tree.leaves(traced)):
        np.testing.assert_array_equal(np.asarray(e), np.asarray(c))
        np.testing.assert_array_equal(np.asarray(e), np.asarray(t))


def test_a_traced_loop_is_one_while_loop_and_a_concrete_one_is_unrolled():
    traced = jax.make_jaxpr(for_trace(doubling))(jnp.ones(2))
    assert [e.primitive.name for e in traced.jaxpr.eqns].count("while") == 1

    def counted(x):
        i = 0
        while i < 3:  # a concrete test: three iterations written out, no loop
            x = x * 2
            i += 1
        return x

    assert "while" not in {e.primitive.name for e in jax.make_jaxpr(for_trace(counted))(jnp.ones(2)).jaxpr.eqns}


def _line(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_refusals_name_the_loop_and_say_what_compiles():
    def grows(x):
        while x.sum() < 10:
            x = jnp.concatenate([x, x])
        return x

    def new_name(x):
        while x.sum() < 10:
            x = x * 2
            seen = x
        return seen

    def returns(x):
        while x.sum() < 10:
            x = x * 2
            if x.sum() > 5:
                return x
        return x

    def with_else(x):
        while x.sum() < 10:
            x = x * 2
        else:
            x = x + 1
        return x

    def vector(x):
        while x < 10:
            x = x * 2
        return x

    for fn, words in [(grows, "`x` is float32[2] before the loop and float32[4] after its body"),
                      (new_name, "`seen` is bound in the loop's body and has no value before the loop, but it is "
                                 "read after it"),
                      (returns, "whose body leaves the function with `return` is not compiled"),
                      (with_else, "whose body has an `else` clause is not compiled")]:
        with pytest.raises(TracedControlFlowError) as raised:
            jax.jit(for_trace(fn))(jnp.ones(2))
        where = f"{__file__}:{_line(fn, 'while')} (`while x.sum() < 10:`): "
        assert str(raised.value).startswith(where), str(raised.value)
        assert words in str(raised.value)
    assert for_trace(returns)(np.ones(2)).tolist() == returns(np.ones(2)).tolist() == [4.0, 4.0]  # as written
    assert for_trace(with_else)(np.ones(2)).tolist() == with_else(np.ones(2)).tolist() == [9.0, 9.0]
    with pytest.raises(ValueError, match="truth value of an array with more than one element"):  # as Python's
        jax.jit(for_trace(vector))(jnp.ones(2))


def test_forward_mode_differentiates_a_traced_loop():
    """JAX differentiates a ``while_loop`` forward (reverse mode through one is refused by graphpar's lowering,
    naming the loop: ``tests/functional/test_jit_while.py``)."""
    out, tangent = jax.jvp(for_trace(doubling), (jnp.ones(2),), (jnp.ones(2),))
    np.testing.assert_array_equal(out[0], [8.0, 8.0])
    np.testing.assert_array_equal(tangent[0], [8.0, 8.0])
