"""MindSpore's unsorted segment reductions: ``UnsortedSegmentSum/Min/Max/Prod()(input_x, segment_ids,
num_segments)``.

The output has shape ``(num_segments,) + input_x.shape[segment_ids.ndim:]``; row ``i`` reduces the slices of
``input_x`` whose id is ``i``. Ids outside ``[0, num_segments)`` (negative ones included) are dropped, as
MindSpore's kernels drop them. A segment that no id names holds the reduction's identity as MindSpore defines it:
0 for Sum, 1 for Prod, the dtype's largest finite value for Min and its lowest for Max.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from graphpar.ops.primitive import Primitive


def _extreme(dtype: Any, largest: bool) -> Any:
    info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype)
    return info.max if largest else info.min


class _UnsortedSegment(Primitive):
    input_names = ("input_x", "segment_ids")
    reduce: ClassVar[Any] = None
    empty: ClassVar[str] = "identity"  # "max"/"min": the dtype's extreme where a segment is empty

    def compute(self, x, segment_ids, num_segments):
        x, ids = jnp.asarray(x), jnp.asarray(segment_ids)
        n = int(num_segments)
        if n <= 0:
            raise ValueError(f"{self.name} '{self.instance_name}': num_segments must be positive, got {n}")
        if ids.shape != x.shape[:ids.ndim]:
            raise ValueError(f"{self.name} '{self.instance_name}': segment_ids' shape {ids.shape} must be a prefix "
                             f"of input_x's shape {x.shape}")
        flat_x = x.reshape((-1,) + x.shape[ids.ndim:])
        flat_ids = ids.reshape(-1)
        valid = (flat_ids >= 0) & (flat_ids < n)
        flat_ids = jnp.where(valid, flat_ids, n)  # an id of n is out of range: jax's segment ops drop it
        out = type(self).reduce(flat_x, flat_ids, num_segments=n)
        if self.empty == "identity":
            return out
        count = jax.ops.segment_sum(jnp.ones_like(flat_ids), flat_ids, num_segments=n)
        fill = jnp.asarray(_extreme(x.dtype, self.empty == "max"), x.dtype)
        present = jnp.reshape(count > 0, (n,) + (1,) * (out.ndim - 1))
        return jnp.where(present, out, fill)


class UnsortedSegmentSum(_UnsortedSegment):
    reduce = staticmethod(jax.ops.segment_sum)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _segment_prod(x, ids, num_segments):
    """``jax.ops.segment_prod`` with a gradient for repeated ids (JAX's scatter-multiply has none): the derivative
    of a segment's product by one of its entries is the product of the others, taken without dividing so that
    zeros are exact (one zero: the others' product for it, 0 for the rest; two or more: 0)."""
    return jax.ops.segment_prod(x, ids, num_segments=num_segments)


def _segment_prod_fwd(x, ids, num_segments):
    return _segment_prod(x, ids, num_segments), (x, ids)


def _segment_prod_bwd(num_segments, res, g):
    x, ids = res
    zero = x == 0
    nonzero_prod = jax.ops.segment_prod(jnp.where(zero, 1, x), ids, num_segments=num_segments)
    zeros = jax.ops.segment_sum(zero.astype(jnp.int32), ids, num_segments=num_segments)
    rows = jnp.clip(ids, 0, num_segments - 1)
    in_range = jnp.reshape((ids >= 0) & (ids < num_segments), (-1,) + (1,) * (x.ndim - 1))
    own_zeros, own_prod, own_g = zeros[rows], nonzero_prod[rows], g[rows]
    others = jnp.where(own_zeros == 0, own_prod / jnp.where(zero, 1, x),
                       jnp.where((own_zeros == 1) & zero, own_prod, 0))
    return jnp.where(in_range, own_g * others, 0), None


_segment_prod.defvjp(_segment_prod_fwd, _segment_prod_bwd)


class UnsortedSegmentProd(_UnsortedSegment):
    reduce = staticmethod(lambda x, ids, num_segments: _segment_prod(x, ids, num_segments))


class UnsortedSegmentMin(_UnsortedSegment):
    reduce = staticmethod(jax.ops.segment_min)
    empty = "max"


class UnsortedSegmentMax(_UnsortedSegment):
    reduce = staticmethod(jax.ops.segment_max)
    empty = "min"
