"""MindSpore's dtype names (``mstype.float32`` ...) as the numpy/JAX dtypes they stand for.

``import graphpar.common.dtype as mstype`` and ``from graphpar import dtype as mstype`` both work. A graphpar dtype
*is* a numpy dtype, so it can be passed to any ``jnp`` function directly.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
bfloat16 = np.dtype(jnp.bfloat16)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)

# MindSpore spellings that are aliases.
half = float16
single = float32
double = float64
int_ = int64
uint = uint64
float_ = float32

_MS_NAMES = {
    bool_: "Bool", int8: "Int8", int16: "Int16", int32: "Int32", int64: "Int64", uint8: "UInt8",
    uint16: "UInt16", uint32: "UInt32", uint64: "UInt64", float16: "Float16", float32: "Float32",
    float64: "Float64", bfloat16: "BFloat16", complex64: "Complex64", complex128: "Complex128",
}


def ms_name(dtype: Any) -> str:
    """The name MindSpore prints for ``dtype`` (``Float32``), used in IR dumps."""
    try:
        return _MS_NAMES.get(np.dtype(dtype), str(np.dtype(dtype)))
    except TypeError:
        return str(dtype)


def from_ms_name(name: str) -> np.dtype:
    """Inverse of :func:`ms_name` (used by the IR reader)."""
    for dt, ms in _MS_NAMES.items():
        if ms == name:
            return dt
    return np.dtype(name)


def pytype_to_dtype(obj: Any) -> np.dtype:
    """MindSpore's ``pytype_to_dtype``: Python ``bool/int/float`` (or a numpy type) to a dtype."""
    if obj is bool:
        return bool_
    if obj is int:
        return int64
    if obj is float:
        return float32
    return np.dtype(obj)


def dtype_to_nptype(dtype: Any) -> type:
    """MindSpore's ``dtype_to_nptype``: the numpy scalar type of ``dtype``."""
    return np.dtype(dtype).type


def dtype_to_pytype(dtype: Any) -> type:
    kind = np.dtype(dtype).kind
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex}[kind]
