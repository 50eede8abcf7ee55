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

from graphpar.common._convert import to_array
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter


class _TensorMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, (jax.Array, Parameter))


class Tensor(metaclass=_TensorMeta):
    """``Tensor(input_data, dtype=None)``: a ``jax.Array`` from a numpy array, list, tuple, scalar or array.

    As in MindSpore: a Python ``float`` becomes float32, a Python ``int`` int64 (int32 unless JAX's x64 mode is
    on), a ``bool`` bool; numpy arrays keep their dtype (float64 becomes float32 unless x64 is on) unless ``dtype``
    says otherwise.
    """

    def __new__(cls, input_data: Any = None, dtype: Any = None, shape: Any = None, init: Any = None) -> jax.Array:
        if init is not None:
            return initializer(init, shape, dtype or np.float32)
        if input_data is None:
            if shape is None:
                raise TypeError("Tensor(): give input_data, or shape and dtype with init")
            return jnp.zeros(shape, dtype or np.float32)
        if isinstance(input_data, Parameter):
            return jnp.asarray(input_data.init_data().value, dtype=dtype)  # a deferred one drawn first
        return to_array(input_data, dtype)


def asnumpy(x: Any) -> np.ndarray:
    """MindSpore's ``Tensor.asnumpy()`` for any array or Parameter."""
    if isinstance(x, Parameter):
        return x.asnumpy()
    return np.asarray(x)
