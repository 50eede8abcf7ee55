"""MindSpore's generated top-k and sized-split primitives, with MindSpore's arguments and outputs:

* ``TopkExt()(input, k, dim=-1, largest=True, sorted=True)`` → ``(values, indices)`` along ``dim`` (indices int64
  in MindSpore; int32 here unless JAX's x64 mode is on);
* ``SplitWithSize()(input, split_size, dim=0)``: parts of the given sizes; ``SplitTensor()(input, split_size,
  dim=0)``: parts of ``split_size`` each, the last one shorter when it does not divide.

Their sharding rules (``graphpar.planner.rules.selection_rules``) follow MindSpore's OperatorInfo: TopkExt keeps
its selected dim whole (as TopKInfo), the splits keep the split dim whole. (``TopK`` and the ``Inplace*`` ops live
beside the other indexing primitives.)
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
