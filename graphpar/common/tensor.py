"""``Tensor``: MindSpore's constructor, returning a ``jax.Array``.

A graphpar Tensor *is* a ``jax.Array`` (JAX no longer accepts array-like wrapper objects in its primitives, so a
wrapper could not be "usable wherever a jax.Array is"). ``Tensor(...)`` builds one the way MindSpore does, and
``isinstance(x, Tensor)`` is true for every ``jax.Array`` and every ``Parameter``. MindSpore's ``t.asnumpy()`` is
``np.asarray(t)`` (or :func:`asnumpy`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class _TensorMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        from graphpar.common.parameter import Parameter

        return isinstance(obj, (jax.Array, Parameter))


class Tensor(metaclass=_TensorMeta):
    """``Tensor(input_data, dtype=None)``: a ``jax.Array`` from a numpy array, list, tuple, scalar or array.

    As in MindSpore: a Python ``float`` becomes float32, a Python ``int`` int64 (int32 unless JAX's x64 mode is
    on), a ``bool`` bool; numpy arrays keep their dtype (float64 becomes float32 unless x64 is on) unless ``dtype``
    says otherwise.
    """

    def __new__(cls, input_data: Any = None, dtype: Any = None, shape: Any = None, init: Any = None) -> jax.Array:
        if init is not None:
            from graphpar.common.initializer import initializer

            return initializer(init, shape, dtype or np.float32)
        if input_data is None:
            if shape is None:
                raise TypeError("Tensor(): give input_data, or shape and dtype with init")
            return jnp.zeros(shape, dtype or np.float32)
        if isinstance(input_data, bool):
            data = np.asarray(input_data)
        elif isinstance(input_data, float):
            data = np.asarray(input_data, np.float32)
        elif isinstance(input_data, int):
            data = np.asarray(input_data, np.int64)
        elif isinstance(input_data, jax.Array):
            data = input_data
        else:
            from graphpar.common.parameter import Parameter

            if isinstance(input_data, Parameter):
                data = input_data.value
            else:
                data = np.asarray(input_data)
                if data.dtype == np.float64 and dtype is None and not jax.config.jax_enable_x64:
                    data = data.astype(np.float32)
        return jnp.asarray(data, dtype=dtype)


def asnumpy(x: Any) -> np.ndarray:
    """MindSpore's ``Tensor.asnumpy()`` for any array or Parameter."""
    from graphpar.common.parameter import Parameter

    if isinstance(x, Parameter):
        return x.asnumpy()
    return np.asarray(x)
