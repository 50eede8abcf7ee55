"""The candidate strategies ``set_algo_parameters`` rules out (``graphpar._context.algo`` says what each key means).

:func:`allowed` filters one op's candidates for sharding propagation, the defaults and the searches: with
``fully_use_devices`` only the candidates that use every device of the mesh (those that use the most, if none
does); with ``tensor_slice_align_enable`` only the MatMul / BatchMatMul candidates whose per-device slice of each
input's last dimension is a multiple of ``tensor_slice_align_size`` (MindSpore's ``tensor_slice_align`` check),
falling back to the unsplit candidate when none is. :func:`approximated` is the search's ``enable_algo_approxi``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from graphpar._context import AlgoParameters
from graphpar.planner.strategy import MeshInfo, NodeStrategy

_ALIGNED_KINDS = frozenset({"MatMul", "BatchMatMul"})


def _uses_all(cands: Sequence[NodeStrategy], mesh: MeshInfo) -> list[NodeStrategy]:
    total = math.prod(mesh.sizes)
    full = [c for c in cands if c.devices_used == total]
    if full:
        return full
    most = max(c.devices_used for c in cands)
    return [c for c in cands if c.devices_used == most]


def _aligned(cand: NodeStrategy, ins: Sequence[tuple[int, ...]], size: int) -> bool:
    for row, shape in zip(cand.dims.inputs, ins):
        if not shape:
            continue
        label = row[-1]
        split = cand.split(label) if label is not None else 1
        if (shape[-1] // split) % size != 0:
            return False
    return True


def active(algo: AlgoParameters) -> bool:
    """Whether :func:`allowed` can remove anything."""
    return algo.fully_use_devices or algo.tensor_slice_align_enable


def allowed(kind: str, cands: Sequence[NodeStrategy], ins: Sequence[tuple[int, ...]], mesh: MeshInfo,
            algo: AlgoParameters) -> tuple[NodeStrategy, ...]:
    """``cands`` less those ``algo`` rules out (never all of them)."""
    out = list(cands)
    if not out:
        return ()
    if algo.tensor_slice_align_enable and kind in _ALIGNED_KINDS:
        kept = [c for c in out if _aligned(c, ins, algo.tensor_slice_align_size)]
        out = kept or [min(out, key=lambda c: c.devices_used)]
    if algo.fully_use_devices:
        out = _uses_all(out, mesh)
    return tuple(out)


def approximated(cands: Sequence[NodeStrategy], algo: AlgoParameters,
                 own_cost: Callable[[NodeStrategy], tuple]) -> tuple[NodeStrategy, ...]:
    """``enable_algo_approxi``: the ``ceil(1 / epsilon)`` candidates of least ``own_cost`` (kept in their order)."""
    size = algo.approximation_size
    if size is None or len(cands) <= size:
        return tuple(cands)
    ranked = sorted(range(len(cands)), key=lambda i: (own_cost(cands[i]), i))[:size]
    return tuple(cands[i] for i in sorted(ranked))
