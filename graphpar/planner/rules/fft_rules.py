"""Sharding rule of MindSpore's FFT family (``FFT`` ... ``IHFFTN``, ``FFTShift``/``IFFTShift``, ``DCT`` ... ``IDCTN``).

MindSpore's ``FFTBase`` OperatorInfo (ops_info/fft_info.cc) splits every dimension the transform does not touch and
none it does: one strategy entry, for the input; the output keeps the input's layout on the untouched dims. Here the
transformed dims get no label (a split there is refused naming the op and the dim), the others share their label
between input and output, so propagation carries a batch split straight through.

:func:`transformed_axes` resolves which dims a call transforms from its static arguments with MindSpore's defaults;
the ops (``graphpar.ops.fft_ops``) use the same function, so the rule and the math cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphpar.planner.dims import DimSpec, register, shapes_of

# kind -> (position of the size argument, position of the dims argument, default dims): positions count the input.
# None default dims: every dim (or the last len(s) dims when s is given), as MindSpore's *N ops and FFTShift.
_ONE = ("FFT", "IFFT", "RFFT", "IRFFT", "HFFT", "IHFFT")
_TWO = ("FFT2", "IFFT2", "RFFT2", "IRFFT2", "HFFT2", "IHFFT2")
_N = ("FFTN", "IFFTN", "RFFTN", "IRFFTN", "HFFTN", "IHFFTN")
SIGNATURES: dict[str, tuple[int | None, int, Any]] = {
    **{k: (1, 2, -1) for k in _ONE},
    **{k: (1, 2, (-2, -1)) for k in _TWO},
    **{k: (1, 2, None) for k in _N},
    "FFTShift": (None, 1, None), "IFFTShift": (None, 1, None),
    "DCT": (2, 3, -1), "IDCT": (2, 3, -1),
    "DCTN": (2, 3, None), "IDCTN": (2, 3, None),
}


def transformed_axes(kind: str, rank: int, args: Mapping[int, Any]) -> tuple[int, ...]:
    """The dims (non-negative, in call order) an FFT-family call on a rank-``rank`` input transforms; ``args`` maps
    argument positions to the static values given (absent or None: MindSpore's default)."""
    size_at, dim_at, default = SIGNATURES[kind]
    dims = args.get(dim_at)
    if dims is None:
        dims = default
    if dims is None:
        sizes = args.get(size_at) if size_at is not None else None
        count = rank if sizes is None else len(sizes)
        dims = tuple(range(rank - count, rank))
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
            raise ValueError(f"{kind}: dim {d!r} is out of range [{-rank}, {rank - 1}] for a rank-{rank} input")
        if d % rank in out:
            raise ValueError(f"{kind}: dim {tuple(dims)} names dim {d % rank} twice")
        out.append(d % rank)
    return tuple(out)


@register(*SIGNATURES)
def _fft(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    axes = set(transformed_axes(node.kind, rank, node.static_args))
    labels = tuple(None if d in axes else f"d{d}" for d in range(rank))
    order = tuple(l for l in labels if l is not None)
    # outputs past the first (JAX residuals kept for the backward) are labelled only on dims sized as the first's
    first = outs[0]
    rows = tuple(tuple(labels[d] if len(out) == rank and out[d] == first[d] else None for d in range(len(out)))
                 for out in outs)
    return DimSpec((labels,), rows, order)

