"""Functional helpers (``from graphpar.ops import functional as F``; ``ops.shape``, ``ops.scalar_to_array``).

These are plain functions over arrays. Calls made inside ``construct`` appear in the graph IR as raw ``jnp``
nodes and are planned like any other equation.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar.ops.nn_ops import relu as _relu


def shape(x: Any) -> tuple[int, ...]:
    """The static shape of ``x`` as a tuple of ints (MindSpore's ``ops.shape``/``F.shape``)."""
    return tuple(np.shape(x.get_value() if hasattr(x, "get_value") else x))


def rank(x: Any) -> int:
    return len(shape(x))


def scalar_to_array(value: float | int | bool) -> jax.Array:
    """A 0-d array holding ``value`` (float32 for a float, as MindSpore)."""
    if isinstance(value, float):
        return jnp.asarray(value, jnp.float32)
    return jnp.asarray(value)


scalar_to_tensor = scalar_to_array


def tuple_to_array(values: tuple) -> jax.Array:
    return jnp.asarray(values)


def reshape(x, new_shape):
    return jnp.reshape(x, tuple(new_shape))


def transpose(x, perm):
    return jnp.transpose(x, tuple(perm))


def cast(x, dtype):
    return jnp.asarray(x).astype(dtype)


def matmul(x, y):
    return jnp.matmul(x, y)


def relu(x):
    return _relu(x)


def softmax(x, axis=-1):
    return jax.nn.softmax(x, axis=axis)


def concat(tensors, axis=0):
    return jnp.concatenate(list(tensors), axis=axis)


def stop_gradient(x):
    return jax.lax.stop_gradient(x)


def ones(shape, dtype=jnp.float32):
    return jnp.ones(tuple(shape) if not isinstance(shape, int) else (shape,), dtype)


def zeros(shape, dtype=jnp.float32):
    return jnp.zeros(tuple(shape) if not isinstance(shape, int) else (shape,), dtype)


def fill(dtype, shape, value):
    return jnp.full(tuple(shape), value, dtype)


def depend(value, expr):
    return value


def div(input, other, rounding_mode=None):  # noqa: A002 (MindSpore's argument name)
    """MindSpore's ``ops.div``: ``input / other``, rounded toward zero (``rounding_mode="trunc"``) or down
    (``"floor"``); ``None`` keeps the true quotient."""
    if rounding_mode is None:
        return jnp.true_divide(input, other)
    if rounding_mode == "floor":
        return jnp.floor_divide(input, other)
    if rounding_mode == "trunc":
        if jnp.issubdtype(jnp.result_type(input, other), jnp.integer):
            return jax.lax.div(*jnp.broadcast_arrays(input, other))
        return jnp.trunc(jnp.true_divide(input, other))
    raise ValueError(f"ops.div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


def abs(input):  # noqa: A001,A002 (MindSpore's names)
    """MindSpore's ``ops.abs(input)``: the elementwise absolute value."""
    return jnp.abs(input)


def lerp(input, end, weight):  # noqa: A002 (MindSpore's argument name)
    """MindSpore's ``ops.lerp(input, end, weight)``: ``input + weight * (end - input)`` (``weight`` a tensor or a
    float), broadcast as numpy does."""
    return input + weight * (end - input)
