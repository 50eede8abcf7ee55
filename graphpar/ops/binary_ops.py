"""MindSpore's remaining elementwise binary primitives (``Mod``, ``TruncateDiv``, ``Xlogy``, ``DivNoNan``, the
bitwise ops, ``Atan2``) and ``MaskedFill``. Each broadcasts its inputs as ``Add`` does, so the planner reads them
with the elementwise rule (``planner/rules/op_rules.py``): a strategy gives one tuple per tensor input."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.scipy.special import xlogy

from graphpar.ops.math_ops import _Binary
from graphpar.ops.primitive import Primitive


def _truncate_div(x, y):
    x, y = jnp.broadcast_arrays(x, y)
    if jnp.issubdtype(x.dtype, jnp.integer) and jnp.issubdtype(y.dtype, jnp.integer):
        return lax.div(x, y)  # C-style: rounds toward zero
    return jnp.trunc(jnp.true_divide(x, y))


def _zero_where(cond, value):
    return jnp.where(cond, jnp.zeros_like(value), value)


class Mod(_Binary):
    """``Mod()(x, y)``: the remainder of a division rounded toward zero; its sign is ``x``'s (C's ``fmod``)."""

    fn = staticmethod(jnp.fmod)


class TruncateDiv(_Binary):
    """``TruncateDiv()(x, y)``: ``x / y`` rounded toward zero."""

    fn = staticmethod(_truncate_div)


class TruncateMod(_Binary):
    """``TruncateMod()(x, y)``: ``x - TruncateDiv(x, y) * y``, the sign of ``x``."""

    fn = staticmethod(jnp.fmod)


class Xlogy(_Binary):
    """``Xlogy()(x, y)``: ``x * log(y)``, 0 where ``x`` is 0."""

    fn = staticmethod(xlogy)


class Xdivy(_Binary):
    """``Xdivy()(x, y)``: ``x / y``, 0 where ``x`` is 0."""

    fn = staticmethod(lambda x, y: _zero_where(jnp.asarray(x) == 0, jnp.true_divide(x, y)))


class MulNoNan(_Binary):
    """``MulNoNan()(x, y)``: ``x * y``, 0 where ``y`` is 0 even if ``x`` is NaN or infinite."""

    fn = staticmethod(lambda x, y: _zero_where(jnp.asarray(y) == 0, jnp.multiply(x, y)))


class DivNoNan(_Binary):
    """``DivNoNan()(x, y)``: ``x / y``, 0 where ``y`` is 0."""

    fn = staticmethod(lambda x, y: _zero_where(jnp.asarray(y) == 0, jnp.true_divide(x, jnp.where(y == 0, 1, y))))


class BitwiseAnd(_Binary):
    fn = staticmethod(jnp.bitwise_and)


class BitwiseOr(_Binary):
    fn = staticmethod(jnp.bitwise_or)


class BitwiseXor(_Binary):
    fn = staticmethod(jnp.bitwise_xor)


class Atan2(_Binary):
    """``Atan2()(x, y)``: the angle of the point ``(y, x)``, elementwise (``arctan(x / y)`` in the right quadrant)."""

    fn = staticmethod(jnp.arctan2)


class MaskedFill(Primitive):
    """``MaskedFill()(input, mask, value)``: ``value`` where the boolean ``mask`` is True, else ``input``; ``mask``
    broadcasts to ``input``, ``value`` is a number or a 0-d tensor (a strategy gives it ``()``)."""

    input_names = ("input", "mask", "value")
    optional_inputs = 1  # a number value has no strategy entry: ((4, 1), (1, 2)); a 0-d tensor value takes ()

    def compute(self, x, mask, value):
        return jnp.where(mask, jnp.asarray(value, dtype=jnp.result_type(x)), x)
