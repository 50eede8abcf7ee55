"""MindSpore's conversion of Python and numpy data to an array: the part of ``Tensor(...)`` that ``Parameter``
shares (below both, so that ``tensor`` may import ``parameter`` for its ``isinstance`` answer)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def to_array(input_data: Any, dtype: Any = None) -> jax.Array:
    """``input_data`` (a number, list, tuple, numpy or jax array) as a ``jax.Array``, with MindSpore's dtypes: a
    Python ``float`` becomes float32, an ``int`` int64 (int32 unless JAX's x64 mode is on), a ``bool`` bool; numpy
    float64 becomes float32 unless x64 is on or ``dtype`` says otherwise."""
    if isinstance(input_data, bool):
        data = np.asarray(input_data)
    elif isinstance(input_data, float):
        data = np.asarray(input_data, np.float32)
    elif isinstance(input_data, int):
        data = np.asarray(input_data, np.int64)
    elif isinstance(input_data, jax.Array):
        data = input_data
    else:
        data = np.asarray(input_data)
        if data.dtype == np.float64 and dtype is None and not jax.config.jax_enable_x64:
            data = data.astype(np.float32)
    if isinstance(data, np.ndarray) and data.dtype != object:
        # a host array is copied to the device with no program (jnp.asarray compiles one per shape: a Parameter
        # made from a numpy array cost a compile per parameter shape); device_put makes JAX's dtypes as it does,
        # but on CPU it may keep the host buffer itself, so it is given a copy the caller cannot change
        return jax.device_put(np.array(data, dtype=None if dtype is None else np.dtype(dtype)))
    return jnp.asarray(data, dtype=dtype)
