"""``Tensor``: MindSpore's constructor, returning a ``jax.Array``.

A graphpar Tensor *is* a ``jax.Array`` (JAX no longer accepts array-like wrapper objects in its primitives, so a
wrapper could not be "usable wherever a jax.Array is"). ``Tensor(...)`` builds one the way MindSpore does, and
``isinstance(x, Tensor)`` is true for every ``jax.Array`` and every ``Parameter``. MindSpore's Tensor methods that
``jax.Array`` lacks (``asnumpy()``, ``numpy()``, ``dim()``) are attached to ``jax.Array`` by :func:`install_methods`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar.common._convert import to_array
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter
from graphpar.common.placeholder import DynamicTensor, is_dynamic_shape
from graphpar.errors import CellError, DynamicShapeError


class _TensorMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, (jax.Array, Parameter, DynamicTensor))


class Tensor(metaclass=_TensorMeta):
    """``Tensor(input_data, dtype=None)``: a ``jax.Array`` from a numpy array, list, tuple, scalar or array.

    ``Tensor(shape=[None, 64], dtype=...)`` (a ``None`` or ``-1`` dimension, no data) is MindSpore's dynamic-shape
    placeholder, a :class:`~graphpar.common.placeholder.DynamicTensor` (``shape`` reports ``-1`` there), for
    ``Cell.set_inputs`` and compiles. As in MindSpore: a Python ``float`` becomes float32, a Python ``int`` int64 (int32 unless JAX's x64 mode is
    on), a ``bool`` bool; numpy arrays keep their dtype (float64 becomes float32 unless x64 is on) unless ``dtype``
    says otherwise.
    """

    def __new__(cls, input_data: Any = None, dtype: Any = None, shape: Any = None, init: Any = None) -> Any:
        dynamic = input_data is None and shape is not None and is_dynamic_shape(shape)
        if init is not None:
            if dynamic:
                raise DynamicShapeError(list(shape), "an initializer draws values, which needs every dimension's "
                                        "size; leave init out for a dynamic-shape placeholder (Tensor(shape=[None, "
                                        "64], dtype=...)) or give the sizes")
            return initializer(init, shape, dtype or np.float32)
        if input_data is None:
            if shape is None:
                raise TypeError("Tensor(): give input_data, or shape and dtype with init")
            if dynamic:  # MindSpore's dynamic-shape placeholder (Cell.set_inputs), no data
                return DynamicTensor.of(shape, dtype)
            return jnp.zeros(shape, dtype or np.float32)
        if isinstance(input_data, Parameter):
            return jnp.asarray(input_data.init_data().get_value(), dtype=dtype)  # a deferred one drawn first
        return to_array(input_data, dtype)


def asnumpy(x: Any) -> np.ndarray:
    """MindSpore's ``Tensor.asnumpy()`` for any array or Parameter."""
    if isinstance(x, Parameter):
        return x.asnumpy()
    return np.asarray(x)


def _asnumpy(self: jax.Array) -> np.ndarray:
    """MindSpore's ``Tensor.asnumpy()``: the value as a numpy array on the host (a copy, as MindSpore's)."""
    return np.array(self)


def _dim(self: jax.Array) -> int:
    """MindSpore's ``Tensor.dim()``: the number of dimensions."""
    return self.ndim


# MindSpore's dtype-conversion methods (``Tensor.long()`` is ``Tensor.to(mstype.int64)``, ...): each is an astype,
# so it works alike on a value and inside a compiled program. int64/float64 are int32/float32 unless JAX's x64 mode
# is on, as for ``Tensor(..., dtype=int64)`` (see ``Tensor``).
_CONVERSIONS = (("bool", jnp.bool_), ("float", jnp.float32), ("bfloat16", jnp.bfloat16), ("double", jnp.float64),
                ("half", jnp.float16), ("int", jnp.int32), ("byte", jnp.uint8), ("long", jnp.int64),
                ("short", jnp.int16))


def _conversion(name: str, dtype: Any):
    def convert(self: Any) -> Any:
        return self.astype(jax.dtypes.canonicalize_dtype(dtype))
    convert.__name__ = name
    convert.__doc__ = f"MindSpore's ``Tensor.{name}()``: the tensor converted to {jnp.dtype(dtype).name}."
    return convert


def _not_in_program(method: str):
    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise CellError(
            f"Tensor.{method}() inside a compiled program (a GRAPH_MODE construct, a jitted step): the value is not "
            "computed yet, as in MindSpore's graph mode. Return the tensor from the program and call "
            f".{method}() on the result, print it with ops.Print(), or run in PYNATIVE_MODE")
    refuse.__name__ = method
    return refuse


def install_methods() -> None:
    """Give every ``jax.Array`` MindSpore's Tensor methods that ``jax.Array`` lacks: ``asnumpy()``, ``numpy()``,
    ``dim()`` and the dtype conversions ``bool()``, ``float()``, ``bfloat16()``, ``double()``, ``half()``, ``int()``,
    ``byte()``, ``long()``, ``short()`` (on tracers too: a conversion is an op of the program). The others MindSpore samples use (``.shape``, ``.dtype``, ``.astype``, ``.item``, ``.size``,
    ``.ndim``, ``.reshape``, ``.sum``, ``.mean``, ``.copy``, ``.tolist``) are ``jax.Array``'s own, with the same
    meaning. Called once by ``graphpar/__init__.py``: a Tensor *is* a ``jax.Array``, so the methods go on that class,
    as JAX itself attaches its array methods; on a tracer (inside a compiled program) ``asnumpy()`` / ``numpy()``
    say why there is no value yet rather than raising a bare AttributeError."""
    for name, method in (("asnumpy", _asnumpy), ("numpy", _asnumpy), ("dim", _dim)):
        if name not in vars(jax.Array):
            setattr(jax.Array, name, method)
    for name in ("asnumpy", "numpy"):
        if name not in vars(jax.core.Tracer):
            setattr(jax.core.Tracer, name, _not_in_program(name))
    if "dim" not in vars(jax.core.Tracer):
        setattr(jax.core.Tracer, "dim", _dim)
    for name, dtype in _CONVERSIONS:
        for cls in (jax.Array, jax.core.Tracer):
            if name not in vars(cls):
                setattr(cls, name, _conversion(name, dtype))
