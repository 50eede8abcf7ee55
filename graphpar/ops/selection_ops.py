"""MindSpore's top-k, indexed-update and sized-split primitives, with MindSpore's arguments and outputs:

* ``TopK(sorted=True)(input_x, k)`` → ``(values, indices)``: the k largest along the last dim, indices int32;
* ``TopkExt()(input, k, dim=-1, largest=True, sorted=True)`` → ``(values, indices)`` along ``dim`` (indices int64
  in MindSpore; int32 here unless JAX's x64 mode is on);
* ``InplaceAdd(indices)(x, v)``, ``InplaceSub(indices)(x, v)``, ``InplaceUpdate(indices)(x, v)``: rows ``indices``
  of ``x`` (dim 0) plus, minus or replaced by the rows of ``v``; a new array (JAX has no in-place write);
* ``SplitWithSize()(input, split_size, dim=0)``: parts of the given sizes; ``SplitTensor()(input, split_size,
  dim=0)``: parts of ``split_size`` each, the last one shorter when it does not divide.

Their sharding rules (``graphpar.planner.rules.selection_rules``) follow MindSpore's OperatorInfo: TopK keeps its
reduced dim whole, the Inplace ops keep dim 0 whole with x and v split alike, the splits keep the split dim whole.
Gradients are JAX's.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from graphpar.ops.primitive import Primitive


def _check_k(kind: str, k: Any, size: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, jnp.integer)) or not 0 <= int(k) <= size:
        raise ValueError(f"{kind}: k must be an int in [0, {size}] (the size of the dim it selects on), got {k!r}")
    return int(k)


def _top_k(x, k: int, dim: int, largest: bool):
    moved = jnp.moveaxis(x, dim, -1)
    values, indices = lax.top_k(moved if largest else -moved, k)
    if not largest:
        values = -values
    return jnp.moveaxis(values, -1, dim), jnp.moveaxis(indices, -1, dim)


class TopK(Primitive):
    """``TopK(sorted=True)(input_x, k)`` → ``(values, indices)``: the ``k`` largest entries of the last dim, largest
    first (JAX's top_k always sorts, which ``sorted=False`` permits), and their int32 positions."""

    input_names = ("input_x",)

    def __init__(self, sorted: bool = True):  # noqa: A002 (MindSpore's argument name)
        if not isinstance(sorted, bool):
            raise TypeError(f"TopK: sorted must be a bool, got {sorted!r}")
        super().__init__(sorted=sorted)

    def compute(self, x, k):
        x = jnp.asarray(x)
        values, indices = _top_k(x, _check_k(self.name, k, x.shape[-1]), x.ndim - 1, True)
        return values, indices.astype(jnp.int32)


class TopkExt(Primitive):
    """``TopkExt()(input, k, dim=-1, largest=True, sorted=True)`` → ``(values, indices)`` along ``dim``: the
    largest (or, ``largest=False``, the smallest) ``k``, in that order."""

    input_names = ("input",)

    def compute(self, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
        x = jnp.asarray(x)
        if isinstance(dim, bool) or not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
            raise ValueError(f"TopkExt: dim must be an int in [{-x.ndim}, {x.ndim - 1}], got {dim!r}")
        values, indices = _top_k(x, _check_k(self.name, k, x.shape[dim]), dim % x.ndim, bool(largest))
        return values, indices.astype(jax.dtypes.canonicalize_dtype(jnp.int64))


def _indices(kind: str, indices: Any) -> tuple[int, ...]:
    idx = (indices,) if isinstance(indices, int) and not isinstance(indices, bool) else indices
    if not isinstance(idx, (tuple, list)) or any(isinstance(i, bool) or not isinstance(i, int) for i in idx):
        raise TypeError(f"{kind}: indices must be an int or a tuple of ints, got {indices!r}")
    return tuple(idx)


class _Inplace(Primitive):
    input_names = ("x", "v")

    def __init__(self, indices: Any):
        super().__init__(indices=_indices(type(self).__name__, indices))

    def compute(self, x, v):
        idx = jnp.asarray(self.attrs["indices"], jnp.int32)
        if v.shape[0] != idx.shape[0] or v.shape[1:] != x.shape[1:]:
            raise ValueError(f"{self.name}: v of shape {v.shape} must have one row per index ({idx.shape[0]}) and "
                             f"x's other dims {x.shape[1:]}")
        return self._apply(x.at[idx], v.astype(x.dtype))

    @staticmethod
    def _apply(at, v):
        raise NotImplementedError


class InplaceAdd(_Inplace):
    """``InplaceAdd(indices)(x, v)``: ``x`` with ``v[i]`` added to row ``indices[i]``."""

    @staticmethod
    def _apply(at, v):
        return at.add(v)


class InplaceSub(_Inplace):
    """``InplaceSub(indices)(x, v)``: ``x`` with ``v[i]`` subtracted from row ``indices[i]``."""

    @staticmethod
    def _apply(at, v):
        return at.subtract(v)


class InplaceUpdate(_Inplace):
    """``InplaceUpdate(indices)(x, v)``: ``x`` with row ``indices[i]`` replaced by ``v[i]``."""

    @staticmethod
    def _apply(at, v):
        return at.set(v)


def _dim(kind: str, dim: Any, rank: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise ValueError(f"{kind}: dim must be an int in [{-rank}, {rank - 1}], got {dim!r}")
    return dim % rank


class SplitWithSize(Primitive):
    """``SplitWithSize()(input, split_size, dim=0)`` → a tuple of parts of sizes ``split_size`` (summing to the
    dim's size)."""

    input_names = ("input",)

    def compute(self, x, split_size, dim=0):
        dim = _dim(self.name, dim, x.ndim)
        sizes = tuple(split_size)
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes) or sum(sizes) != x.shape[dim]:
            raise ValueError(f"SplitWithSize: split_size {sizes} must be ints >= 0 summing to dim {dim}'s size "
                             f"{x.shape[dim]}")
        cuts = [sum(sizes[:i + 1]) for i in range(len(sizes) - 1)]
        return tuple(jnp.split(x, cuts, axis=dim))


class SplitTensor(Primitive):
    """``SplitTensor()(input, split_size, dim=0)`` → parts of ``split_size`` along ``dim``, the last shorter when
    ``split_size`` does not divide the dim's size."""

    input_names = ("input",)

    def compute(self, x, split_size, dim=0):
        dim = _dim(self.name, dim, x.ndim)
        if isinstance(split_size, bool) or not isinstance(split_size, int) or split_size < 1:
            raise ValueError(f"SplitTensor: split_size must be an int >= 1, got {split_size!r}")
        return tuple(jnp.split(x, list(range(split_size, x.shape[dim], split_size)), axis=dim))
