"""Shape, layout and indexing primitives (MindSpore's array ops)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from graphpar.errors import StrategyError
from graphpar.ops.primitive import Primitive
from graphpar.planner.layout import is_layout_strategy
from graphpar.planner.slicing import strided_index


class Reshape(Primitive):
    """``Reshape()(x, shape)``; one entry of ``shape`` may be -1."""

    def compute(self, x, shape):
        return jnp.reshape(x, tuple(shape))


class Transpose(Primitive):
    """``Transpose()(x, perm)``."""

    def compute(self, x, perm):
        return jnp.transpose(x, tuple(perm))


class Cast(Primitive):
    """``Cast()(x, dtype)``."""

    def compute(self, x, dtype):
        return jnp.asarray(x).astype(dtype)


class ExpandDims(Primitive):
    def compute(self, x, axis):
        return jnp.expand_dims(x, axis)


class Squeeze(Primitive):
    """``Squeeze(axis=())(x)``: ``()`` removes every dimension of size 1."""

    def __init__(self, axis: Any = ()):
        super().__init__(axis=(axis,) if isinstance(axis, int) else tuple(axis))

    def compute(self, x):
        axis = self.attrs["axis"]
        return jnp.squeeze(x, axis=axis if axis else None)


class Flatten(Primitive):
    """``Flatten()(x)``: keep dimension 0, merge the rest."""

    def compute(self, x):
        return jnp.reshape(x, (x.shape[0], -1))


class Tile(Primitive):
    """``Tile()(x, multiples)``; its strategy has one split per element of ``multiples`` (the output's rank), as
    MindSpore's TileInfo (``planner.rules.op_rules``)."""

    def _strategy_shapes(self, shapes, args):
        if is_layout_strategy(self.in_strategy):  # MindSpore's layouts describe the input tensor itself
            return shapes
        multiples = tuple(int(m) for m in args[1])
        x = (1,) * (len(multiples) - len(shapes[0])) + tuple(shapes[0])
        multiples = (1,) * (len(x) - len(multiples)) + multiples
        return [tuple(a * m for a, m in zip(x, multiples))] + list(shapes[1:])

    def compute(self, x, multiples):
        return jnp.tile(x, tuple(multiples))


class Concat(Primitive):
    """``Concat(axis=0)((x1, x2, ...))``."""

    input_names = None

    def __init__(self, axis: int = 0):
        super().__init__(axis=axis)

    def compute(self, xs):
        return jnp.concatenate(list(xs), axis=self.attrs["axis"])


class Stack(Primitive):
    """``Stack(axis=0)((x1, x2, ...))``."""

    input_names = None

    def __init__(self, axis: int = 0):
        super().__init__(axis=axis)

    def compute(self, xs):
        return jnp.stack(list(xs), axis=self.attrs["axis"])


class Split(Primitive):
    """``Split(axis=0, output_num=1)(x)`` → tuple of ``output_num`` equal parts."""

    def __init__(self, axis: int = 0, output_num: int = 1):
        super().__init__(axis=axis, output_num=output_num)

    def compute(self, x):
        return tuple(jnp.split(x, self.attrs["output_num"], axis=self.attrs["axis"]))


class Slice(Primitive):
    """``Slice()(x, begin, size)``; a size of -1 takes the rest of the dimension."""

    def compute(self, x, begin, size):
        limit = [x.shape[i] if s == -1 else b + s for i, (b, s) in enumerate(zip(begin, size))]
        return lax.slice(x, tuple(begin), tuple(limit))


class StridedSlice(Primitive):
    """``StridedSlice(begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)(x, begin,
    end, strides)``, every mask as MindSpore (TensorFlow's semantics, ``planner.slicing``)."""

    input_names = ("x",)

    def __init__(self, begin_mask: int = 0, end_mask: int = 0, ellipsis_mask: int = 0, new_axis_mask: int = 0,
                 shrink_axis_mask: int = 0):
        super().__init__(begin_mask=begin_mask, end_mask=end_mask, ellipsis_mask=ellipsis_mask,
                         new_axis_mask=new_axis_mask, shrink_axis_mask=shrink_axis_mask)

    _MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")

    def compute(self, x, begin, end, strides):
        # the masks only: other attributes (add_prim_attr's, e.g. MicroBatchInterleaved's strided_slice_flag) ride along
        return x[strided_index(begin, end, strides, **{k: self.attrs[k] for k in self._MASKS})]


class Gather(Primitive):
    """``Gather(batch_dims=0)(input_params, input_indices, axis)``: take slices of ``input_params`` along ``axis``.
    The first ``batch_dims`` dimensions of both inputs are batch dimensions (equal sizes, ``axis >= batch_dims``):
    each batch element gathers from its own slice of the table."""

    input_names = ("input_params", "input_indices")

    def __init__(self, batch_dims: int = 0):
        if isinstance(batch_dims, bool) or not isinstance(batch_dims, int):
            raise TypeError(f"Gather(batch_dims=...) takes an int, got {type(batch_dims).__name__} {batch_dims!r}")
        super().__init__(batch_dims=batch_dims)

    def compute(self, params, indices, axis=0):
        b = self.attrs.get("batch_dims", 0)
        b = b + jnp.ndim(indices) if b < 0 else b  # MindSpore counts a negative batch_dims from the indices' rank
        axis = axis % jnp.ndim(params)
        if axis < b:
            raise ValueError(f"Gather '{self.instance_name}': axis {axis} must be >= batch_dims {b}")
        take = functools.partial(jnp.take, axis=axis - b)
        for _ in range(b):
            take = jax.vmap(take)
        return take(params, indices)


GatherV2 = Gather


class TensorToScalar(Primitive):
    """``TensorToScalar()(x)``: a one-element tensor as a scalar. Called eagerly it returns a Python number; inside
    a traced ``construct`` a value has no Python number yet, so it is a 0-d tensor (what a scalar is in XLA)."""

    def compute(self, x):
        out = jnp.reshape(x, ())
        return out if isinstance(out, jax.core.Tracer) else out.item()


class Select(Primitive):
    """``Select()(cond, x, y)``: ``x`` where ``cond`` else ``y``."""

    input_names = ("cond", "x", "y")

    def compute(self, cond, x, y):
        return jnp.where(cond, x, y)


class OneHot(Primitive):
    """``OneHot(axis=-1)(indices, depth, on_value, off_value)``."""

    input_names = ("indices", "on_value", "off_value")

    def __init__(self, axis: int = -1):
        super().__init__(axis=axis)

    def _tensor_arg_indices(self):
        # indices (arg 0), on_value (arg 2), off_value (arg 3); depth (arg 1) is an int
        return (0, 2, 3)

    def _strategies_for(self, shapes, scope):
        """MindSpore checks OneHot's first entry against the *output* (``OneHot().shard(((dp, 1), (), ()))`` for
        1-D indices; ``OneHotInfo::CheckStrategy``); graphpar's rule reads it per input (``((dp,), (), ())``). The
        output form is translated: the depth split at ``axis`` leaves the input strategy and, when it is not 1,
        becomes the output strategy (the depth takes the devices the indices' strategy repeats on)."""
        hint = self.in_strategy
        if not hint or is_layout_strategy(hint) or not shapes or len(hint[0]) != len(shapes[0]) + 1:
            return hint, self.out_strategy
        axis = self.attrs["axis"] % len(hint[0])
        depth = hint[0][axis]
        translated = (hint[0][:axis] + hint[0][axis + 1:],) + tuple(hint[1:])
        if depth == 1:
            return translated, self.out_strategy
        if self.out_strategy is not None:
            raise StrategyError(self.instance_name, hint, f"the depth dimension is split {depth} in in_strategy "
                                f"(MindSpore's output-shaped form) and out_strategy {self.out_strategy} is given too",
                                scope, "Give the depth split in one of them")
        return translated, (tuple(hint[0]),)

    def compute(self, indices, depth, on_value, off_value):
        hot = jnp.expand_dims(indices, self.attrs["axis"]) == jnp.expand_dims(
            jnp.arange(int(depth)), _axis_broadcast(self.attrs["axis"], jnp.ndim(indices) + 1))
        on = jnp.asarray(on_value)
        return jnp.where(hot, on, jnp.asarray(off_value, on.dtype))


def _axis_broadcast(axis: int, ndim: int) -> tuple[int, ...]:
    axis = axis % ndim
    return tuple(i for i in range(ndim) if i != axis)


class Pad(Primitive):
    """``Pad(paddings)(x)``: ``paddings`` is ((before, after), ...) per dimension, zero fill."""

    def __init__(self, paddings: Any):
        super().__init__(paddings=tuple(tuple(p) for p in paddings))

    def compute(self, x):
        return jnp.pad(x, self.attrs["paddings"])


class Fill(Primitive):
    """``Fill()(dtype, shape, value)``."""

    input_names = ()

    def compute(self, dtype, shape, value):
        return jnp.full(tuple(shape), value, dtype)


class Shape(Primitive):
    """``Shape()(x)``: the static shape as a tuple of ints."""

    def __call__(self, x):
        return tuple(np.shape(x))


class DType(Primitive):
    """``DType()(x)``: the data type of ``x`` (``ms.float32`` ...), static as in MindSpore, so it can feed Cast."""

    def __call__(self, x):
        return np.dtype(x.dtype)


class Depend(Primitive):
    """``Depend()(value, expr)``: returns ``value`` (XLA orders effects itself)."""

    input_names = ("value", "expr")

    def compute(self, value, expr):
        return value
