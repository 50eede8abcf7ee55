"""MindSpore's batched linear-algebra primitives, with MindSpore's arguments and outputs:

* ``TraceV2()(input, offset=0, axis1=1, axis2=0, dtype=None)``: the sum of the ``offset`` diagonal of the
  ``(axis1, axis2)`` planes; the output drops those two dims (dtype None: the input's);
* ``SolveTriangular()(a, b, trans=0, lower=False, unit_diagonal=False)``: ``x`` with ``op(a) x = b`` for triangular
  ``a`` (..., M, M) and ``b`` (..., M) or (..., M, K); ``trans`` 0/'N', 1/'T' or 2/'C';
* ``LstsqV2()(A, B, driver=None)``: least squares, see :class:`LstsqV2`.

Sharding (``graphpar.planner.rules.box_linalg_rules``) as MindSpore's TraceV2Info / SolveTriangularInfo /
LstsqV2Info: the matrix dims stay whole, the batch dims split (both inputs' alike). Gradients are JAX's.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from graphpar._logging import notice_once
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


_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


class LstsqV2(Primitive):
    """``LstsqV2()(A, B, driver=None)`` → ``(solution, residuals, rank, singular_values)``: the least-squares
    solution of ``A x = B`` for ``A`` (..., m, n) and ``B`` (..., m) or (..., m, k), as ``torch.linalg.lstsq``
    (MindSpore's model): ``driver`` None is ``'gelsy'``; ``rank`` (int64, int32 without x64) comes with every driver
    but ``'gels'``, ``singular_values`` with ``'gelsd'``/``'gelss'``, others are empty ``(0,)`` tensors.

    ``residuals`` (the squared residual norms, (..., k) or (...)) are returned when ``m > n`` and the driver is not
    ``'gelsy'``; MindSpore also empties them for a rank-deficient ``A``, a value-dependent shape a compiled JAX program
    cannot have, so graphpar returns them for every ``A`` then (said once per process, when it applies)."""

    input_names = ("A", "B")

    def compute(self, a, b, driver=None):
        driver = "gelsy" if driver is None else driver
        if driver not in _DRIVERS:
            raise ValueError(f"LstsqV2: driver must be None or one of {', '.join(map(repr, _DRIVERS))}, got "
                             f"{driver!r}")
        if a.ndim < 2 or b.ndim not in (a.ndim - 1, a.ndim) or b.shape[a.ndim - 2] != a.shape[-2]:
            raise ValueError(f"LstsqV2: A must be (..., m, n) and B (..., m) or (..., m, k) with A's m; got "
                             f"{a.shape} and {b.shape}")
        vector = b.ndim == a.ndim - 1
        rhs = (b[..., None] if vector else b).astype(a.dtype)
        m, n = a.shape[-2], a.shape[-1]
        solution = jnp.linalg.pinv(a) @ rhs
        empty = jnp.zeros((0,), a.dtype)
        if m > n and driver != "gelsy":
            notice_once("lstsqv2-residuals", "LstsqV2: residuals are returned for every A, rank-deficient ones "
                        "included (MindSpore returns an empty tensor for those: a shape that depends on the values, "
                        "which a compiled JAX program cannot have)")
            residuals = jnp.sum(jnp.square(jnp.abs(a @ solution - rhs)), axis=-2)
            residuals = residuals[..., 0] if vector else residuals
        else:
            residuals = empty
        rank = empty.astype(jax.dtypes.canonicalize_dtype(jnp.int64)) if driver == "gels" else (
            jnp.linalg.matrix_rank(a).astype(jax.dtypes.canonicalize_dtype(jnp.int64)))
        singular = jnp.linalg.svd(a, compute_uv=False) if driver in ("gelsd", "gelss") else empty
        return (solution[..., 0] if vector else solution), residuals, rank, singular
