"""The one global device mesh of a compiled program, and how device matrices map onto it.

MindSpore gives every op a *device matrix* whose dimensions are filled by ranks in row-major order. graphpar uses one
mesh per program whose axes refine every device matrix in use: a device-matrix dimension of size 4 on 8 devices is
the pair of mesh axes ``("m1", "m2")`` of a (2, 2, 2) mesh, so ``PartitionSpec("m0", ("m1", "m2"))`` places
exactly the ranks MindSpore would (rank 0's partial-sum group of the quickstart MatMul is (0, 1, 2, 3)).

The axes are the common refinement of the matrices' row-major cut points, split into prime factors. When two
matrices cannot share one refinement (e.g. [2, 3] and [3, 2] on 6 devices) :func:`mesh_axis_sizes` refuses with
an error naming both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from graphpar.errors import DeviceError, MeshConflictError


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _cuts(matrix: Sequence[int]) -> list[int]:
    """Row-major cut points of a device matrix: the strides of its dimensions, as sizes from the left."""
    cuts, acc = [], 1
    for d in matrix:
        acc *= d
        cuts.append(acc)
    return cuts


def mesh_axis_sizes(n_devices: int, matrices: Sequence[Sequence[int]] = (),
                    owners: Sequence[str] | None = None) -> tuple[int, ...]:
    """Sizes of the mesh axes (left to right) that refine every device matrix in ``matrices`` (``owners`` names
    whose matrix each is, for the error)."""
    cuts = {1, n_devices}
    for matrix in matrices:
        if math.prod(matrix) != n_devices:
            raise DeviceError(f"device matrix {list(matrix)} has {math.prod(matrix)} devices, the mesh has "
                              f"{n_devices}")
        cuts.update(_cuts(matrix))
    chain = sorted(cuts)
    for a, b in zip(chain, chain[1:]):
        if b % a:
            culprits = [(f"{owners[i]} " if owners else "") + str(list(m)) for i, m in enumerate(matrices)
                        if a in _cuts(m) or b in _cuts(m)]
            raise MeshConflictError(
                f"the device matrices {', '.join(culprits)} cannot share one device mesh on {n_devices} devices (their "
                f"row-major groupings {a} and {b} do not nest); choose strategies whose device matrices split the "
                f"devices in the same order, e.g. all powers of two")
    sizes: list[int] = []
    for a, b in zip(chain, chain[1:]):
        sizes += _prime_factors(b // a)
    return tuple(sizes) if sizes else (1,)


def axis_names(n_axes: int) -> tuple[str, ...]:
    return tuple(f"m{i}" for i in range(n_axes))


def make_mesh(devices: Sequence[jax.Device], matrices: Sequence[Sequence[int]] = ()) -> Mesh:
    """A mesh over ``devices`` (in rank order) whose axes refine every matrix in ``matrices``."""
    sizes = mesh_axis_sizes(len(devices), matrices)
    return Mesh(np.asarray(devices, dtype=object).reshape(sizes), axis_names(len(sizes)),
                axis_types=(AxisType.Auto,) * len(sizes))


