"""MindSpore's remaining elementwise, reduction and matrix primitives, with MindSpore's arguments and outputs:

* elementwise: ``Invert()(x)`` (bitwise not), ``PopulationCount()(x)`` (set bits, uint8), ``HShrink(lambd=0.5)(x)``
  (``x`` where ``|x| > lambd``, else 0), ``ApproximateEqual(tolerance=1e-5)(x, y)`` (``|x - y| < tolerance``),
  ``Tril(diagonal=0)(x)`` (zeros above the ``diagonal``-th diagonal of the last two dims);
* elementwise too: ``Lgamma()(x)``, ``Trunc()(x)``, ``Elu(alpha=1.0)(x)``;
* along an axis: ``CumProd(exclusive=False, reverse=False)(x, axis)``, ``Cummax(axis)(x)``/``Cummin(axis)(x)``
  (running extremes and where they were reached), ``ReverseV2(axis)(x)``;
* reductions: ``SquareSumAll()(x, y)`` (``(sum(x ** 2), sum(y ** 2))``), ``LpNorm(axis, p=2, keep_dims=False,
  epsilon=1e-12)(x)``;
* matrices: ``Cholesky(upper=False)(x)`` on a batch of symmetric positive-definite matrices;
* creation: ``Eye()(n, m, dtype)``, ``FillV2()(shape, value)`` (``shape`` a tensor or tuple, ``value`` a 0-d
  tensor whose dtype the output takes).

Sharding (``graphpar.planner.rules.math_extra_rules``): elementwise ops (Tril included: its mask is built from
global positions, so XLA splits the matrix dims too, as MindSpore's TrilInfo does) split any dim; CumProd, Cummax,
Cummin and ReverseV2 keep their axes whole; reductions split any dim, a split reduced dim leaving a partial result
that is reduced across devices; Cholesky keeps its matrix dims whole. Gradients are JAX's.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar.ops.primitive import Primitive


def _float_attr(kind: str, name: str, value: Any, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{kind}: {name} must be a number{bound}, got {value!r}")
    return float(value)


class Invert(Primitive):
    """``Invert()(x)``: the bitwise NOT of an integer tensor."""

    def compute(self, x):
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise TypeError(f"Invert: x must be an integer tensor, got {x.dtype}")
        return jnp.invert(x)


class PopulationCount(Primitive):
    """``PopulationCount()(x)``: the number of set bits of each element of an integer tensor, as uint8."""

    def compute(self, x):
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise TypeError(f"PopulationCount: x must be an integer tensor, got {x.dtype}")
        return jax.lax.population_count(x).astype(jnp.uint8)


class HShrink(Primitive):
    """``HShrink(lambd=0.5)(input_x)``: ``x`` where ``|x| > lambd``, else 0."""

    input_names = ("input_x",)

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=_float_attr("HShrink", "lambd", lambd, 0.0))

    def compute(self, x):
        return jnp.where(jnp.abs(x) > self.attrs["lambd"], x, jnp.zeros_like(x))


class ApproximateEqual(Primitive):
    """``ApproximateEqual(tolerance=1e-5)(x, y)``: ``|x - y| < tolerance``, a bool tensor."""

    input_names = ("x", "y")

    def __init__(self, tolerance: float = 1e-5):
        super().__init__(tolerance=_float_attr("ApproximateEqual", "tolerance", tolerance))

    def compute(self, x, y):
        return jnp.abs(x - y) < self.attrs["tolerance"]


class Tril(Primitive):
    """``Tril(diagonal=0)(x)``: ``x`` with the entries above the ``diagonal``-th diagonal of its last two dims set
    to 0 (``diagonal`` > 0 keeps more, < 0 fewer)."""

    def __init__(self, diagonal: int = 0):
        if isinstance(diagonal, bool) or not isinstance(diagonal, int):
            raise TypeError(f"Tril: diagonal must be an int, got {diagonal!r}")
        super().__init__(diagonal=diagonal)

    def compute(self, x):
        if x.ndim < 2:
            raise ValueError(f"Tril: x must have at least 2 dims, got shape {x.shape}")
        return jnp.tril(x, self.attrs["diagonal"])


class CumProd(Primitive):
    """``CumProd(exclusive=False, reverse=False)(x, axis)``: running products along ``axis``; ``exclusive``
    starts from 1 (each entry leaves itself out), ``reverse`` runs from the end."""

    def __init__(self, exclusive: bool = False, reverse: bool = False):
        super().__init__(exclusive=bool(exclusive), reverse=bool(reverse))

    def compute(self, x, axis):
        if self.attrs["reverse"]:
            x = jnp.flip(x, axis)
        out = jnp.cumprod(x, axis=axis)
        if self.attrs["exclusive"]:
            ones = jnp.ones_like(jax.lax.slice_in_dim(out, 0, 1, axis=axis % x.ndim))
            out = jnp.concatenate([ones, jax.lax.slice_in_dim(out, 0, x.shape[axis] - 1, axis=axis % x.ndim)],
                                  axis=axis)
        return jnp.flip(out, axis) if self.attrs["reverse"] else out


class SquareSumAll(Primitive):
    """``SquareSumAll()(x, y)`` → ``(sum(x ** 2), sum(y ** 2))``, two scalars."""

    input_names = ("x", "y")

    def compute(self, x, y):
        return jnp.sum(jnp.square(x)), jnp.sum(jnp.square(y))


class LpNorm(Primitive):
    """``LpNorm(axis, p=2, keep_dims=False, epsilon=1e-12)(input)``: ``sum(|x| ** p) ** (1 / p)`` over ``axis``
    (an int or a list), kept as size-1 dims with ``keep_dims``; ``p = 0`` counts the non-zero entries."""

    input_names = ("input",)

    def __init__(self, axis: Any, p: int = 2, keep_dims: bool = False, epsilon: float = 1e-12):
        axes = (axis,) if isinstance(axis, int) and not isinstance(axis, bool) else axis
        if not isinstance(axes, (tuple, list)) or any(isinstance(a, bool) or not isinstance(a, int) for a in axes):
            raise TypeError(f"LpNorm: axis must be an int or a list of ints, got {axis!r}")
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise ValueError(f"LpNorm: p must be an int >= 0, got {p!r}")
        super().__init__(axis=list(axes), p=p, keep_dims=bool(keep_dims),
                         epsilon=_float_attr("LpNorm", "epsilon", epsilon))

    def compute(self, x):
        axes = tuple(a % x.ndim for a in self.attrs["axis"])
        p, keep = self.attrs["p"], self.attrs["keep_dims"]
        if p == 0:
            return jnp.sum(x != 0, axis=axes, keepdims=keep).astype(x.dtype)
        if p == 1:
            return jnp.sum(jnp.abs(x), axis=axes, keepdims=keep)
        return jnp.power(jnp.sum(jnp.power(jnp.abs(x), p), axis=axes, keepdims=keep), 1.0 / p)


class Cholesky(Primitive):
    """``Cholesky(upper=False)(input_x)``: the lower (``upper``: upper) triangular factor of each symmetric
    positive-definite matrix of the batch ``input_x`` (..., N, N)."""

    input_names = ("input_x",)

    def __init__(self, upper: bool = False):
        super().__init__(upper=bool(upper))

    def compute(self, x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"Cholesky: input_x must be a batch of square matrices, got shape {x.shape}")
        low = jnp.linalg.cholesky(x)
        return jnp.swapaxes(low, -1, -2).conj() if self.attrs["upper"] else low


class Eye(Primitive):
    """``Eye()(n, m, t)``: an ``n`` x ``m`` identity matrix of dtype ``t`` (no tensor input)."""

    input_names = ()

    def compute(self, n, m, t):
        for name, v in (("n", n), ("m", m)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Eye: {name} must be an int >= 1, got {v!r}")
        return jnp.eye(n, m, dtype=t)


class FillV2(Primitive):
    """``FillV2()(shape, value)``: a tensor of ``shape`` filled with the 0-d tensor ``value``, in ``value``'s dtype.
    ``shape`` is a tuple or a 1-D int tensor; inside a compiled network only a tuple is known when it compiles (a
    JAX program's shapes are static), so a tensor shape is refused there by name."""

    input_names = ()

    def compute(self, shape, value):
        if isinstance(shape, jax.core.Tracer):
            raise ValueError("FillV2: shape must be known when the network is compiled: give a tuple (a tensor "
                             "held by the Cell or built in construct is traced there)")
        dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
        value = jnp.asarray(value)
        if value.size != 1:
            raise ValueError(f"FillV2: value must hold one element, got shape {value.shape}")
        return jnp.full(dims, value.reshape(()), value.dtype)


class _CumExtreme(Primitive):
    """``Cummax(axis)(input)`` / ``Cummin(axis)(input)`` → ``(values, indices)``: the running maximum (minimum) along
    ``axis`` and the position it was last reached at (int32; MindSpore's indices are int32 too)."""

    input_names = ("input",)
    _largest = True

    def __init__(self, axis: int):
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(f"{type(self).__name__}: axis must be an int, got {axis!r}")
        super().__init__(axis=axis)

    def compute(self, x):
        axis = self.attrs["axis"] % x.ndim
        better = jnp.greater_equal if self._largest else jnp.less_equal
        positions = jnp.broadcast_to(
            jnp.arange(x.shape[axis], dtype=jnp.int32).reshape([-1 if d == axis else 1 for d in range(x.ndim)]),
            x.shape)

        def step(carry, item):
            value, index = item
            take = better(value, carry[0])
            new = (jnp.where(take, value, carry[0]), jnp.where(take, index, carry[1]))
            return new, new

        moved_x, moved_i = jnp.moveaxis(x, axis, 0), jnp.moveaxis(positions, axis, 0)
        _, (values, indices) = jax.lax.scan(step, (moved_x[0], moved_i[0]), (moved_x, moved_i))
        return jnp.moveaxis(values, 0, axis), jnp.moveaxis(indices, 0, axis)


class Cummax(_CumExtreme):
    __doc__ = _CumExtreme.__doc__


class Cummin(_CumExtreme):
    __doc__ = _CumExtreme.__doc__
    _largest = False


class ReverseV2(Primitive):
    """``ReverseV2(axis)(input_x)``: ``input_x`` reversed along each dim of ``axis`` (a tuple or list of ints)."""

    input_names = ("input_x",)

    def __init__(self, axis: Any):
        if not isinstance(axis, (tuple, list)) or any(isinstance(a, bool) or not isinstance(a, int) for a in axis):
            raise TypeError(f"ReverseV2: axis must be a tuple or list of ints, got {axis!r}")
        super().__init__(axis=tuple(axis))

    def compute(self, x):
        return jnp.flip(x, self.attrs["axis"])


class Lgamma(Primitive):
    """``Lgamma()(input)``: the log of the absolute value of the Gamma function, elementwise."""

    input_names = ("input",)

    def compute(self, x):
        return jax.lax.lgamma(x)


class Trunc(Primitive):
    """``Trunc()(input_x)``: rounds towards zero, elementwise."""

    input_names = ("input_x",)

    def compute(self, x):
        return jnp.trunc(x)


class Elu(Primitive):
    """``Elu(alpha=1.0)(input_x)``: ``x`` where positive, else ``alpha * (exp(x) - 1)``."""

    input_names = ("input_x",)

    def __init__(self, alpha: float = 1.0):
        super().__init__(alpha=_float_attr("Elu", "alpha", alpha))

    def compute(self, x):
        return jnp.where(x > 0, x, self.attrs["alpha"] * jnp.expm1(jnp.minimum(x, 0)))
