"""The source rewrite behind a compiled ``if`` (``graphpar.ir.control_flow``), on plain functions: with concrete
conditions the rewritten function behaves as the original, line for line; with traced conditions (``jax.jit``) it
computes what the original computes on the same values; refusals and errors inside a branch name the user's line."""

import inspect
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graphpar.errors import TracedControlFlowError
from graphpar.ir.control_flow import converted, for_trace


def branches(x, mode, calls):
    """if / elif / else, ``and``/``or``/``not`` with side effects, a conditional expression, a loop."""
    if mode == "double":
        y = x * 2
    elif mode == "negate" and calls.append("and") is None:
        y = -x
    else:
        y = x
    if not (x.sum() > 10 or calls.append("or")):
        y = y + 1
    scale = 3.0 if x.sum() > 0 else 0.5
    total = 0
    for i in range(3):
        if i % 2:
            total = total + i
    return y * scale + total


def one_branch(x, flag):
    if flag:
        only_here = x + 1
    return only_here


def no_if(x):
    return x + 1


def test_concrete_conditions_run_exactly_as_python():
    f = for_trace(branches)
    assert f is not branches and for_trace(branches) is f  # rewritten once, cached
    assert for_trace(no_if) is no_if and converted(no_if) is None  # nothing to rewrite: the function itself
    for mode in ("double", "negate", "other"):
        for x in (np.ones(3, np.float32), -np.ones(3, np.float32), np.full(3, 5.0, np.float32)):
            calls_a, calls_b = [], []
            np.testing.assert_array_equal(branches(x, mode, calls_a), f(x, mode, calls_b))
            assert calls_a == calls_b  # the same operands evaluated (short-circuit kept)
    assert for_trace(one_branch)(1.0, True) == 2.0
    with pytest.raises(UnboundLocalError, match="only_here"):  # Python's error for the branch not taken
        for_trace(one_branch)(1.0, False)


def test_traced_conditions_compute_what_python_computes_on_the_values():
    compiled = jax.jit(lambda x: for_trace(branches)(x, "double", []))
    for x in (np.ones(3, np.float32), -np.ones(3, np.float32), np.full(3, 5.0, np.float32)):
        np.testing.assert_allclose(compiled(x), branches(x, "double", []), rtol=1e-6)


def test_a_name_bound_in_one_branch_only_used_inside_it_stays_local():
    def f(x):
        out = x
        if x.sum() > 0:
            scratch = x * 3  # read only inside its branch: unbound after the if, as on the Python path not taken
            out = scratch + 1
        return out

    np.testing.assert_allclose(jax.jit(for_trace(f))(jnp.ones(2)), [4.0, 4.0])
    np.testing.assert_allclose(jax.jit(for_trace(f))(-jnp.ones(2)), [-1.0, -1.0])


def test_refusals_name_the_file_and_line():
    def shapes(x):
        if x.sum() > 0:
            y = x
        else:
            y = x[:1]
        return y

    def vector(x):
        if x > 0:
            x = x + 1
        return x

    first = {f: inspect.getsourcelines(f)[1] + 1 for f in (shapes, vector)}  # (`while`: test_while_rewrite.py)
    with pytest.raises(TracedControlFlowError, match=f":{first[shapes]} .*`y` is float32\\[2\\] after the `if` "
                       r"branch and float32\[1\] after the `else` branch"):
        jax.jit(for_trace(shapes))(jnp.ones(2))
    with pytest.raises(ValueError, match="truth value of an array with more than one element"):  # as Python's
        jax.jit(for_trace(vector))(jnp.ones(3))


def test_an_error_inside_a_branch_names_the_users_line():
    def f(x):
        if x.sum() > 0:
            y = x @ jnp.ones((5, 5))  # (4,) @ (5, 5): a shape error inside the branch
        else:
            y = x
        return y

    line = inspect.getsourcelines(f)[1] + 2
    with pytest.raises(TypeError) as raised:
        jax.jit(for_trace(f))(jnp.ones(4))
    frames = [(fr.filename, fr.lineno) for fr in traceback.extract_tb(raised.value.__traceback__)]
    assert (__file__, line) in frames


class Scaled:
    def __init__(self):
        self.__factor = 2.0  # a private (name-mangled) attribute

    def apply(self, x):
        if x.sum() > 0:
            x = x * self.__factor
        return super().__repr__() if x is None else x


def test_methods_keep_private_names_and_super():
    obj = Scaled()
    np.testing.assert_allclose(jax.jit(for_trace(obj.apply))(jnp.ones(2)), [2.0, 2.0])
    np.testing.assert_allclose(for_trace(obj.apply)(-np.ones(2)), [-1.0, -1.0])


def halve_if_large(x):
    """A helper with its own ``if`` on the value: called from a rewritten function, it is rewritten too."""
    if x.sum() > 0:
        x = x * 0.5
    else:
        x = x + 1.0
    return x


class Scaler:
    def apply(self, x):
        return halve_if_large(x) + self.offset(x)

    def offset(self, x):
        return 1.0 if x.max() > 2 else 0.0


def calls_helpers(x):
    return Scaler().apply(jnp.asarray(x)) + jnp.tanh(x)  # a user method, a user function, a library function


def test_an_if_in_a_function_the_traced_function_calls_is_compiled_too():
    compiled = jax.jit(for_trace(calls_helpers))
    for x in (np.ones(3, np.float32), -np.ones(3, np.float32), np.full(3, 3.0, np.float32)):
        np.testing.assert_allclose(compiled(x), calls_helpers(x), rtol=1e-6)
    with pytest.raises(jax.errors.TracerBoolConversionError):  # the same helper, not reached through a rewrite
        jax.jit(halve_if_large)(np.ones(3, np.float32))


KEEP_PROB = jnp.asarray(0.9, jnp.float32)  # a constant the traced function closes over (a Cell's Tensor attribute)


def on_a_constant(x):
    """An ``if`` on a constant whose branch returns: kept in its Python form, so it must be decided while tracing."""
    if KEEP_PROB < 1.0 and not (KEEP_PROB <= 0.0):
        return x * KEEP_PROB
    y = x if KEEP_PROB >= 1.0 else -x
    while KEEP_PROB > 2.0:
        y = y + 1
    return y


def test_a_test_on_constants_is_decided_while_tracing():
    # under jax.jit an operation on constants is staged (a tracer without a value): the rewrite evaluates every test
    # with compile-time evaluation, so this `if` is concrete and runs as Python, as MindSpore's graph mode folds it
    f = jax.jit(for_trace(on_a_constant))
    np.testing.assert_allclose(f(jnp.ones(3)), np.full(3, 0.9, np.float32))
    jaxpr = jax.make_jaxpr(for_trace(on_a_constant))(jnp.ones(3))
    assert [e.primitive.name for e in jaxpr.eqns] == ["mul"]  # no comparison, no select: the branch was chosen
