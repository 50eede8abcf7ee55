"""MindSpore's unsorted segment reductions: ``UnsortedSegmentSum/Min/Max/Prod()(input_x, segment_ids,
num_segments)``.

The output has shape ``(num_segments,) + input_x.shape[segment_ids.ndim:]``; row ``i`` reduces the slices of
``input_x`` whose id is ``i``. Ids outside ``[0, num_segments)`` (negative ones included) are dropped, as
MindSpore's kernels drop them. A segment that no id names holds the reduction's identity as MindSpore defines it:
0 for Sum, 1 for Prod, the dtype's largest finite value for Min and its lowest for Max.
"""

from __future__ import annotations

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


class UnsortedSegmentProd(_UnsortedSegment):
    reduce = staticmethod(jax.ops.segment_prod)


class UnsortedSegmentMin(_UnsortedSegment):
    reduce = staticmethod(jax.ops.segment_min)
    empty = "max"


class UnsortedSegmentMax(_UnsortedSegment):
    reduce = staticmethod(jax.ops.segment_max)
    empty = "min"
