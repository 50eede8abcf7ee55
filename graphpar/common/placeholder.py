"""MindSpore's dynamic-shape placeholders: ``Tensor(shape=[None, 64], dtype=ms.int32)`` and ``Cell.set_inputs``.

A placeholder has a shape and a dtype and no data: ``None`` (or ``-1``) marks a *dynamic* dimension whose size is
known only when the network is called. MindSpore compiles a network once for such a signature
(``net.set_inputs(x, y)``, or the placeholders given to ``_cell_graph_executor.compile``) and runs it on any size in
those dimensions. graphpar plans the signature once, as JAX's shape polymorphism sees it: each dynamic dimension is a
symbol (``jax.export.symbolic_shape``), so a trace learns which dimension of every op's input depends on it (see
``graphpar.compile.plans.dynamic``). XLA still compiles static shapes: a call with concrete tensors compiles that
shape (checked against the signature here, :func:`check_call`).

A placeholder is no ``jax.Array`` (it holds no value): it answers ``shape`` (``-1`` for a dynamic dimension, as
MindSpore's ``Tensor.shape``), ``dtype``, ``ndim`` and ``isinstance(p, Tensor)``; asking it for a value is a named
error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from graphpar.errors import DynamicShapeError, InputSignatureError


def is_dynamic_shape(shape: Sequence[Any]) -> bool:
    """Whether ``shape`` (a ``Tensor(shape=...)`` argument) has a dynamic dimension: ``None`` or a negative int."""
    return any(d is None or (isinstance(d, (int, np.integer)) and d < 0) for d in shape)


@dataclass(frozen=True)
class DynamicTensor:
    """``Tensor(shape=[None, 64], dtype=...)``: a shape with dynamic dimensions (``-1``) and a dtype, no data."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @classmethod
    def of(cls, shape: Sequence[Any], dtype: Any) -> "DynamicTensor":
        dims = []
        for d in shape:
            if d is None or (isinstance(d, (int, np.integer)) and d < 0):
                dims.append(-1)
            elif isinstance(d, (int, np.integer)) and not isinstance(d, bool):
                dims.append(int(d))
            else:
                raise DynamicShapeError(list(shape), f"dimension {d!r} is neither an int nor None")
        return cls(tuple(dims), np.dtype(jax.dtypes.canonicalize_dtype(dtype or np.float32)))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dynamic_dims(self) -> tuple[int, ...]:
        """The positions of the dynamic dimensions."""
        return tuple(i for i, d in enumerate(self.shape) if d < 0)

    def dim(self) -> int:
        return self.ndim

    def asnumpy(self) -> Any:
        raise DynamicShapeError(list(self.shape), "a placeholder holds no data: it describes the inputs a compile "
                                "is planned for; call the network with real tensors for values")

    numpy = asnumpy

    def __repr__(self) -> str:
        return f"Tensor(shape={list(self.shape)}, dtype={self.dtype.name}, value=None)"


def has_dynamic(args: Sequence[Any]) -> bool:
    """Whether a placeholder among ``args`` has a dynamic dimension (a signature of static placeholders, as
    ``set_inputs`` keeps concrete tensors, is planned as those shapes)."""
    return any(isinstance(a, DynamicTensor) and a.dynamic_dims for a in jax.tree.leaves(tuple(args)))


def as_avals(args: Sequence[Any]) -> list[Any]:
    """``args`` with each placeholder without a dynamic dimension as a ``jax.ShapeDtypeStruct``."""
    return [jax.ShapeDtypeStruct(a.shape, a.dtype) if isinstance(a, DynamicTensor) and not a.dynamic_dims else a
            for a in args]


def symbolic_avals(args: Sequence[Any], shared: bool = False) -> list[Any]:
    """``args`` with each placeholder as a ``jax.ShapeDtypeStruct`` whose dynamic dimensions are symbols of one
    symbolic scope; other leaves unchanged. Each dynamic dimension its own symbol (``a{i}_{d}``: input ``i``,
    dimension ``d``), as MindSpore's ``-1`` are independent; with ``shared``, one symbol per dimension position
    (``d{d}``: the batch of the data and of the label the same size), for a network that combines them (a loss
    subtracting the label from the output needs them equal, which MindSpore checks only when it runs)."""
    leaves, treedef = jax.tree.flatten(tuple(args))
    names = {f"d{d}" if shared else f"a{i}_{d}": None for i, leaf in enumerate(leaves)
             if isinstance(leaf, DynamicTensor) for d in leaf.dynamic_dims}
    symbols = dict(zip(names, jax.export.symbolic_shape(", ".join(names)))) if names else {}
    out = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, DynamicTensor):
            shape = tuple(symbols[f"d{d}" if shared else f"a{i}_{d}"] if n < 0 else n for d, n in enumerate(leaf.shape))
            leaf = jax.ShapeDtypeStruct(shape, leaf.dtype)
        out.append(leaf)
    return list(jax.tree.unflatten(treedef, out))


def standin_avals(args: Sequence[Any], size: int) -> list[Any]:
    """``args`` with each placeholder as a ``jax.ShapeDtypeStruct`` whose dynamic dimensions are ``size``."""
    return [jax.ShapeDtypeStruct(tuple(size if d < 0 else d for d in a.shape), a.dtype)
            if isinstance(a, DynamicTensor) else a for a in args]


_TENSORS = (DynamicTensor, jax.Array, np.ndarray)


def signature_of(cell: str, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """``Cell.set_inputs(*inputs)``'s signature: each tensor as a placeholder (its shape, ``-1`` where dynamic, and
    dtype: the signature keeps no data), any other input (a Python number or tuple, a compile-time constant in
    MindSpore's graph mode) as given."""
    if not inputs:
        raise InputSignatureError(cell, "set_inputs() needs the network's inputs: Tensor(shape=[None, ...], "
                                  "dtype=...) placeholders or tensors, one per construct argument")
    return tuple(DynamicTensor.of(x.shape, x.dtype) if isinstance(x, _TENSORS) else x for x in inputs)


def check_call(cell: str, signature: Sequence[Any], args: Sequence[Any]) -> None:
    """A call's arguments against ``set_inputs``' signature, as MindSpore checks them: the same number of inputs,
    each tensor of the signature's rank and dtype, with the signature's size in every static dimension (a dynamic
    dimension takes any size)."""
    if len(args) != len(signature):
        raise InputSignatureError(cell, f"called with {len(args)} inputs where set_inputs() gave {len(signature)}")
    for i, (want, got) in enumerate(zip(signature, args)):
        if not isinstance(want, _TENSORS) or not isinstance(got, _TENSORS):
            continue
        expect = tuple(want.shape)
        shape = tuple(got.shape)
        if len(shape) != len(expect) or any(w >= 0 and w != g for w, g in zip(expect, shape)):
            raise InputSignatureError(cell, f"input {i} has shape {list(shape)}, which does not match "
                                      f"set_inputs()' {list(expect)} (-1: any size; every other dimension as given)")
        if np.dtype(got.dtype) != np.dtype(want.dtype):
            raise InputSignatureError(cell, f"input {i} has dtype {np.dtype(got.dtype).name} where set_inputs() "
                                      f"gave {np.dtype(want.dtype).name}")
