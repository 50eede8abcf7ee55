"""MindSpore's batched linear-algebra primitives, with MindSpore's arguments and outputs:

* ``TraceV2()(input, offset=0, axis1=1, axis2=0, dtype=None)``: the sum of the ``offset`` diagonal of the
  ``(axis1, axis2)`` planes; the output drops those two dims (dtype None: the input's);
* ``SolveTriangular()(a, b, trans=0, lower=False, unit_diagonal=False)``: ``x`` with ``op(a) x = b`` for triangular
  ``a`` (..., M, M) and ``b`` (..., M) or (..., M, K); ``trans`` 0/'N', 1/'T' or 2/'C'.

Sharding (``graphpar.planner.rules.linalg_rules``) as MindSpore's TraceV2Info / SolveTriangularInfo: the matrix
dims stay whole, the batch dims split (both inputs' alike). Gradients are JAX's.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from graphpar.ops.primitive import Primitive

_TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}


class TraceV2(Primitive):
    """``TraceV2()(input, offset=0, axis1=1, axis2=0, dtype=None)``: ``sum_i input[..., i, i + offset, ...]``."""

    input_names = ("input",)

    def compute(self, x, offset=0, axis1=1, axis2=0, dtype=None):
        x = jnp.asarray(x)
        for name, axis in (("axis1", axis1), ("axis2", axis2)):
            if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
                raise ValueError(f"TraceV2: {name} must be an int in [{-x.ndim}, {x.ndim - 1}], got {axis!r}")
        if axis1 % x.ndim == axis2 % x.ndim:
            raise ValueError(f"TraceV2: axis1 ({axis1}) and axis2 ({axis2}) must be different dims")
        out = jnp.trace(x, offset, axis1, axis2)
        return out if dtype is None else out.astype(dtype)


def trailing_dims(a_rank: int, b_rank: int) -> tuple[int, int]:
    """How many trailing dims of ``a`` and ``b`` are matrix dims (not batch) in a SolveTriangular call: ``a``'s
    last 2; ``b``'s last 1 when it is a batch of vectors (one dim fewer than ``a``), else its last 2."""
    return 2, (1 if b_rank == a_rank - 1 else 2)


class SolveTriangular(Primitive):
    """``SolveTriangular()(a, b, trans=0, lower=False, unit_diagonal=False)``."""

    input_names = ("a", "b")

    def compute(self, a, b, trans: Any = 0, lower: bool = False, unit_diagonal: bool = False):
        if trans not in _TRANS:
            raise ValueError(f"SolveTriangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
        if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"SolveTriangular: a must be a batch of square matrices, got shape {a.shape}")
        vector = trailing_dims(a.ndim, b.ndim)[1] == 1
        rhs = b[..., None] if vector else b
        t = _TRANS[trans]
        x = lax.linalg.triangular_solve(a, rhs.astype(a.dtype), left_side=True, lower=bool(lower),
                                        transpose_a=t > 0, conjugate_a=t == 2, unit_diagonal=bool(unit_diagonal))
        return x[..., 0] if vector else x
