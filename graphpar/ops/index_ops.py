"""Indexing primitives beyond Gather (MindSpore's ``GatherNd``, ``GatherD``, ``TensorScatterUpdate``,
``BroadcastTo``): the math in ``jnp``; their sharding rules are in ``graphpar.planner.rules.index_rules``."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from graphpar.ops.array_ops import Gather
from graphpar.ops.primitive import Primitive


def _index_tuple(indices: Any) -> tuple:
    """``indices[..., k]`` for each k: the per-dimension index arrays of an N-d index tensor (last dim = N)."""
    indices = jnp.asarray(indices)
    return tuple(indices[..., k] for k in range(indices.shape[-1]))


class GatherNd(Primitive):
    """``GatherNd()(input_x, indices)``: ``output[i_0, ..., i_{K-2}] = input_x[indices[i_0, ..., i_{K-2}]]``; the
    output's shape is ``indices.shape[:-1] + input_x.shape[indices.shape[-1]:]``. ``indices.shape[-1]`` must not
    exceed ``input_x``'s rank (``ValueError``, as MindSpore)."""

    input_names = ("input_x", "indices")

    def compute(self, x, indices):
        depth = jnp.shape(indices)[-1]
        if depth > jnp.ndim(x):
            raise ValueError(f"GatherNd '{self.instance_name}': indices.shape[-1] ({depth}) must be <= the rank of "
                             f"input_x ({jnp.ndim(x)})")
        return x[_index_tuple(indices)]


class GatherD(Primitive):
    """``GatherD()(x, dim, index)``: ``output[i][j] = x[index[i][j]][j]`` along ``dim`` (``dim=0`` here); the
    output has ``index``'s shape."""

    input_names = ("x", "index")

    def _tensor_arg_indices(self):
        return (0, 2)  # dim (argument 1) is an int

    def compute(self, x, dim, index):
        return jnp.take_along_axis(x, jnp.asarray(index), axis=int(dim) % jnp.ndim(x))


class TensorScatterUpdate(Primitive):
    """``TensorScatterUpdate()(input_x, indices, updates)``: a copy of ``input_x`` whose slices at ``indices``
    (an N-d index in the last dimension, as GatherNd reads it) are replaced by ``updates``, of shape
    ``indices.shape[:-1] + input_x.shape[indices.shape[-1]:]``."""

    input_names = ("input_x", "indices", "updates")

    def compute(self, x, indices, updates):
        return jnp.asarray(x).at[_index_tuple(indices)].set(updates)


class BroadcastTo(Primitive):
    """``BroadcastTo(shape)(input_x)``: ``input_x`` broadcast to ``shape`` (numpy rules, aligned right); a ``-1``
    in ``shape`` keeps that dimension of ``input_x``."""

    def __init__(self, shape: Any):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if not all(isinstance(s, int) and (s > 0 or s == -1) for s in shape):
            raise ValueError(f"BroadcastTo(shape): each entry must be a positive int or -1, got {shape!r}")
        super().__init__(shape=shape)

    def target(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        shape = self.attrs["shape"]
        offset = len(shape) - len(in_shape)
        if offset < 0:
            raise ValueError(f"BroadcastTo '{self.instance_name}': shape {shape} has fewer dimensions than the "
                             f"input's {in_shape}")
        out = []
        for i, s in enumerate(shape):
            if s == -1:
                if i < offset:
                    raise ValueError(f"BroadcastTo '{self.instance_name}': -1 at position {i} of {shape} has no "
                                     f"input dimension to keep (input shape {in_shape})")
                s = in_shape[i - offset]
            out.append(s)
        return tuple(out)

    def compute(self, x):
        return jnp.broadcast_to(x, self.target(jnp.shape(x)))


class SparseGatherV2(Gather):
    """``SparseGatherV2()(input_params, input_indices, axis)``: Gather's forward (MindSpore's variant whose table
    gradient is a sparse row update; JAX's gather gradient is a scatter-add of the same rows). Planned as Gather."""


class EmbeddingLookup(Primitive):
    """``EmbeddingLookup()(input_params, input_indices, offset)``: the rows ``input_indices - offset`` of
    ``input_params`` (a table shard whose first row is global row ``offset``); an index outside the table's rows
    gives a row of zeros, as MindSpore's kernel."""

    input_names = ("input_params", "input_indices")

    def compute(self, params, indices, offset=0):
        rows = jnp.shape(params)[0]
        local = jnp.asarray(indices) - offset
        inside = (local >= 0) & (local < rows)
        out = jnp.take(params, jnp.where(inside, local, 0), axis=0)
        return jnp.where(jnp.expand_dims(inside, tuple(range(local.ndim, out.ndim))), out, 0)


class _InplaceRows(Primitive):
    """``Inplace*(indices)(x, v)``: row ``indices[i]`` of ``x`` combined with row ``i`` of ``v`` (``v`` has
    ``len(indices)`` rows and ``x``'s other dimensions); a new array, as every JAX value."""

    input_names = ("x", "v")

    def __init__(self, indices: Any):
        indices = (indices,) if isinstance(indices, int) else tuple(int(i) for i in indices)
        super().__init__(indices=indices)

    def rows(self, x, v):
        idx = jnp.asarray(self.attrs["indices"], jnp.int32)
        if jnp.shape(v)[0] != idx.shape[0] or jnp.shape(v)[1:] != jnp.shape(x)[1:]:
            raise ValueError(f"{self.name} '{self.instance_name}': v's shape {jnp.shape(v)} must be "
                             f"({idx.shape[0]},) + x's shape {jnp.shape(x)} without its first dimension")
        return jnp.asarray(x).at[idx]


class InplaceAdd(_InplaceRows):
    def compute(self, x, v):
        return self.rows(x, v).add(v)


class InplaceSub(_InplaceRows):
    def compute(self, x, v):
        return self.rows(x, v).add(-v)


class InplaceUpdate(_InplaceRows):
    def compute(self, x, v):
        return self.rows(x, v).set(v)
