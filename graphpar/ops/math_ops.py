"""Elementwise, matrix and reduction primitives (MindSpore's ``mindspore.ops`` math ops)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from graphpar.ops.primitive import Primitive


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None or axis == () or axis == []:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted(a % ndim if ndim else 0 for a in axis))


class MatMul(Primitive):
    """``MatMul(transpose_a=False, transpose_b=False)(x, y)``: 2-D matrix product (MindSpore also accepts the
    names ``transpose_x1``/``transpose_x2``)."""

    input_names = ("x", "y")

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False, **aliases: Any):
        transpose_a = aliases.pop("transpose_x1", transpose_a)
        transpose_b = aliases.pop("transpose_x2", transpose_b)
        if aliases:
            raise TypeError(f"MatMul() got unexpected arguments {sorted(aliases)}; valid: transpose_a, transpose_b")
        super().__init__(transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))

    def compute(self, x, y):
        if jnp.ndim(x) != 2 or jnp.ndim(y) != 2:
            raise ValueError(f"MatMul '{self.instance_name}' takes 2-D inputs, got shapes {jnp.shape(x)} and "
                             f"{jnp.shape(y)}; use BatchMatMul for batched inputs")
        # the transposes as the contraction's dimension numbers, not as ops: differentiated, the product then keeps
        # its operands themselves (a Parameter's own buffer), not a transposed copy of each (what a pipeline
        # stage's forward would otherwise hold per micro-batch in flight)
        x, y = jnp.asarray(x), jnp.asarray(y)
        dtype = jnp.result_type(x, y)
        contract = ((0 if self.attrs["transpose_a"] else 1,), (1 if self.attrs["transpose_b"] else 0,))
        return lax.dot_general(x.astype(dtype), y.astype(dtype), (contract, ((), ())))


class BatchMatMul(MatMul):
    """``BatchMatMul(transpose_a=False, transpose_b=False)(x, y)``: matmul over the last two dims, batch dims
    broadcast."""

    def compute(self, x, y):
        if self.attrs["transpose_a"]:
            x = jnp.swapaxes(x, -1, -2)
        if self.attrs["transpose_b"]:
            y = jnp.swapaxes(y, -1, -2)
        return jnp.matmul(x, y)


class _Binary(Primitive):
    input_names = ("x", "y")
    fn: Any = None

    def compute(self, x, y):
        return type(self).fn(x, y)


class _Unary(Primitive):
    input_names = ("x",)
    fn: Any = None

    def compute(self, x):
        return type(self).fn(x)


def _div(x, y):
    if jnp.issubdtype(jnp.result_type(x), jnp.integer) and jnp.issubdtype(jnp.result_type(y), jnp.integer):
        return lax.div(*jnp.broadcast_arrays(x, y))  # C-style truncation, as MindSpore's Div on integers
    return jnp.true_divide(x, y)


class Add(_Binary):
    fn = staticmethod(jnp.add)


TensorAdd = Add  # MindSpore's deprecated name of Add: the same primitive ("Add" in dumps and strategy files)


class Sub(_Binary):
    fn = staticmethod(jnp.subtract)


class Mul(_Binary):
    fn = staticmethod(jnp.multiply)


class RealDiv(_Binary):
    fn = staticmethod(jnp.true_divide)


class Div(_Binary):
    fn = staticmethod(_div)


class FloorDiv(_Binary):
    fn = staticmethod(jnp.floor_divide)


class FloorMod(_Binary):
    fn = staticmethod(jnp.mod)


class Maximum(_Binary):
    fn = staticmethod(jnp.maximum)


class Minimum(_Binary):
    fn = staticmethod(jnp.minimum)


class Pow(_Binary):
    fn = staticmethod(jnp.power)


class SquaredDifference(_Binary):
    fn = staticmethod(lambda x, y: jnp.square(x - y))


class Equal(_Binary):
    fn = staticmethod(jnp.equal)


class NotEqual(_Binary):
    fn = staticmethod(jnp.not_equal)


class Greater(_Binary):
    fn = staticmethod(jnp.greater)


class GreaterEqual(_Binary):
    fn = staticmethod(jnp.greater_equal)


class Less(_Binary):
    fn = staticmethod(jnp.less)


class LessEqual(_Binary):
    fn = staticmethod(jnp.less_equal)


class LogicalAnd(_Binary):
    fn = staticmethod(jnp.logical_and)


class LogicalOr(_Binary):
    fn = staticmethod(jnp.logical_or)


class LogicalNot(_Unary):
    fn = staticmethod(jnp.logical_not)


class Exp(_Unary):
    fn = staticmethod(jnp.exp)


class Log(_Unary):
    fn = staticmethod(jnp.log)


class Sqrt(_Unary):
    fn = staticmethod(jnp.sqrt)


class Rsqrt(_Unary):
    fn = staticmethod(lax.rsqrt)


class Square(_Unary):
    fn = staticmethod(jnp.square)


class Neg(_Unary):
    fn = staticmethod(jnp.negative)


class Abs(_Unary):
    fn = staticmethod(jnp.abs)


class Sign(_Unary):
    fn = staticmethod(jnp.sign)


class Floor(_Unary):
    fn = staticmethod(jnp.floor)


class Ceil(_Unary):
    fn = staticmethod(jnp.ceil)


class Reciprocal(_Unary):
    fn = staticmethod(jnp.reciprocal)


class Sin(_Unary):
    fn = staticmethod(jnp.sin)


class Cos(_Unary):
    fn = staticmethod(jnp.cos)


class Tanh(_Unary):
    fn = staticmethod(jnp.tanh)


class Erf(_Unary):
    fn = staticmethod(jax.scipy.special.erf)


class Sigmoid(_Unary):
    fn = staticmethod(jax.nn.sigmoid)


class ZerosLike(_Unary):
    fn = staticmethod(jnp.zeros_like)


class OnesLike(_Unary):
    fn = staticmethod(jnp.ones_like)


class Identity(_Unary):
    fn = staticmethod(lambda x: x)


class StopGradient(_Unary):
    fn = staticmethod(lax.stop_gradient)


class AddN(Primitive):
    """``AddN()((x1, x2, ...))``: sum of a tuple of tensors."""

    input_names = None

    def compute(self, xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out


class _Reduce(Primitive):
    """``ReduceX(keep_dims=False)(x, axis=())``: ``axis=()`` reduces every dimension."""

    input_names = ("x",)
    fn: Any = None

    def __init__(self, keep_dims: bool = False):
        super().__init__(keep_dims=bool(keep_dims))

    def compute(self, x, axis=()):
        axes = _axes(axis, jnp.ndim(x))
        return type(self).fn(x, axis=axes, keepdims=self.attrs["keep_dims"])


class ReduceSum(_Reduce):
    fn = staticmethod(jnp.sum)


class ReduceMean(_Reduce):
    fn = staticmethod(jnp.mean)


class ReduceMax(_Reduce):
    fn = staticmethod(jnp.max)


class ReduceMin(_Reduce):
    fn = staticmethod(jnp.min)


class ReduceProd(_Reduce):
    fn = staticmethod(jnp.prod)


class ReduceAll(_Reduce):
    fn = staticmethod(jnp.all)


class ReduceAny(_Reduce):
    fn = staticmethod(jnp.any)


class Argmax(Primitive):
    """``Argmax(axis=-1, output_type=int32)(x)``."""

    def __init__(self, axis: int = -1, output_type: Any = jnp.int32):
        super().__init__(axis=axis, output_type=output_type)

    def compute(self, x):
        return jnp.argmax(x, axis=self.attrs["axis"]).astype(self.attrs["output_type"])


class Argmin(Argmax):
    def compute(self, x):
        return jnp.argmin(x, axis=self.attrs["axis"]).astype(self.attrs["output_type"])


class ArgMaxWithValue(Primitive):
    """``ArgMaxWithValue(axis=0, keep_dims=False)(x)`` → ``(index, value)``."""

    def __init__(self, axis: int = 0, keep_dims: bool = False):
        super().__init__(axis=axis, keep_dims=bool(keep_dims))

    def compute(self, x):
        axis, keep = self.attrs["axis"], self.attrs["keep_dims"]
        return (jnp.argmax(x, axis=axis, keepdims=keep).astype(jnp.int32), jnp.max(x, axis=axis, keepdims=keep))


class CumSum(Primitive):
    """``CumSum(exclusive=False, reverse=False)(x, axis)``."""

    def __init__(self, exclusive: bool = False, reverse: bool = False):
        super().__init__(exclusive=exclusive, reverse=reverse)

    def compute(self, x, axis):
        if self.attrs["reverse"]:
            x = jnp.flip(x, axis)
        out = jnp.cumsum(x, axis=axis)
        if self.attrs["exclusive"]:
            out = out - x
        if self.attrs["reverse"]:
            out = jnp.flip(out, axis)
        return out
