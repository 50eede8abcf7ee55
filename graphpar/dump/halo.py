"""The overlap exchange of a window op split on its spatial dimensions, as MindSpore's Conv2DInfo computes it.

When Conv2D / Conv3D / MaxPool3D / AvgPool3D is split on input dimension 2 ("top / bottom") or 3 ("left /
right") and its pad mode is not "valid", each rank needs rows of its neighbours' slices: MindSpore inserts a
``NeighborExchangeV2`` before the op (``send_lens`` / ``recv_lens`` = [top, bottom, left, right]) and runs the op with
the pads only the border ranks keep (``pad_list``). XLA exchanges the same halos (its CollectivePermutes);
:func:`halo_exchange` says what MindSpore's graph holds for this rank, from the op's attributes, its global shapes and
the mesh axes graphpar split the dimensions over. The sizes follow MindSpore's formulas: the rank at position ``b`` of
``n`` needs ``pad_before + (in - out*stride) * b / n`` elements before its slice and
``(b + 1) * (out*stride - in) / n + kernel - stride - pad_before`` after it (C++ integer division).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphpar.ir.graph import MeshInfo, Node, Spec

WINDOW_OPS = ("Conv2D", "Conv3D", "MaxPool3D", "AvgPool3D")


def _cdiv(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _spatial(value: Any, n: int) -> tuple[int, ...]:
    """The last ``n`` entries of an attribute given per spatial dimension or per dimension (an int: all of them)."""
    if isinstance(value, int):
        return (value,) * n
    return tuple(int(v) for v in value)[-n:]


@dataclass(frozen=True)
class _Dim:
    """One split spatial dimension of the op's input: its sizes, window, the pads and this rank's position."""

    size_in: int
    size_out: int
    kernel: int
    stride: int
    pad_before: int
    parts: int
    bias: int

    def before(self, bias: int) -> int:
        return self.pad_before + _cdiv((self.size_in - self.size_out * self.stride) * bias, self.parts)

    def after(self, bias: int) -> int:
        return (_cdiv((bias + 1) * (self.size_out * self.stride - self.size_in), self.parts) + self.kernel
                - self.stride - self.pad_before)

    def recv(self) -> tuple[int, int]:
        """Elements this rank receives from its (previous, next) neighbour."""
        first, last = self.bias == 0, self.bias == self.parts - 1
        return (0 if first else self.before(self.bias), 0 if last else self.after(self.bias))

    def send(self) -> tuple[int, int]:
        """Elements this rank sends to its (previous, next) neighbour: what they need from it."""
        first, last = self.bias == 0, self.bias == self.parts - 1
        return (0 if first else self.after(self.bias - 1), 0 if last else self.before(self.bias + 1))


def _pads(node: Node, shape_in: Sequence[int], shape_out: Sequence[int], kernel: Sequence[int],
          stride: Sequence[int]) -> list[int]:
    """[before, after] per spatial dimension: the op's own list in "pad" mode, MindSpore's split of the needed pad
    in "same" mode (the smaller half before), none in "valid" mode."""
    nsp = len(kernel)
    mode = str(node.attrs.get("pad_mode", "valid")).lower()
    if mode == "pad":
        pads = node.attrs.get("pad_list", node.attrs.get("pad", 0))
        pads = [int(pads)] * (2 * nsp) if isinstance(pads, int) else [int(p) for p in pads]
        return pads[-2 * nsp:]
    if mode == "same":
        out = []
        for i in range(nsp):
            need = max(0, (shape_out[2 + i] - 1) * stride[i] + kernel[i] - shape_in[2 + i])
            out += [need // 2, need - need // 2]
        return out
    return [0] * (2 * nsp)


def position(mesh: MeshInfo, axes: Sequence[str], rank: int) -> int:
    """The index of ``rank`` along ``axes`` (major axis first): which block of a dimension split by ``axes`` it
    holds."""
    coords = np.unravel_index(rank, mesh.sizes)
    picked = [mesh.names.index(a) for a in axes]
    return int(np.ravel_multi_index([coords[i] for i in picked], [mesh.sizes[i] for i in picked])) if picked else 0


def _moved(mesh: MeshInfo, rank: int, moves: Sequence[tuple[Sequence[str], int]]) -> int:
    """The rank ``delta`` positions further along each ``(axes, delta)`` of ``moves``; -1 past an end."""
    coords = [int(c) for c in np.unravel_index(rank, mesh.sizes)]
    for axes, delta in moves:
        picked = [mesh.names.index(a) for a in axes]
        sizes = [mesh.sizes[i] for i in picked]
        target = position(mesh, axes, rank) + delta
        if not 0 <= target < int(np.prod(sizes)):
            return -1
        for i, c in zip(picked, np.unravel_index(target, sizes)):
            coords[i] = int(c)
    return int(np.ravel_multi_index(coords, mesh.sizes))


def halo_exchange(node: Node, in_spec: Spec, shape_in: Sequence[int], shape_out: Sequence[int], mesh: MeshInfo,
                  rank: int) -> tuple[dict[str, Any], tuple[int, ...]] | None:
    """(NeighborExchangeV2's attributes, the op's pad list on this rank) when ``node`` is a window op whose input
    ``in_spec`` splits dimension 2 or 3 and needs its neighbours' rows; None otherwise."""
    if node.kind not in WINDOW_OPS or len(shape_in) < 4:
        return None
    nsp = len(shape_in) - 2
    kernel = _spatial(node.attrs.get("kernel_size", 1), nsp)
    dilation = _spatial(node.attrs.get("dilation", 1), nsp)
    kernel = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation))
    stride = _spatial(node.attrs.get("strides", node.attrs.get("stride", 1)), nsp)
    pads = _pads(node, shape_in, shape_out, kernel, stride)
    mode = str(node.attrs.get("pad_mode", "valid")).lower()
    dims: list[_Dim | None] = []
    for j in (0, 1):  # input dimensions 2 (top / bottom) and 3 (left / right)
        axes = in_spec[2 + j]
        parts = mesh.size(axes)
        if parts <= 1 or mode == "valid" or kernel[j] <= stride[j]:
            dims.append(None)
            continue
        dims.append(_Dim(shape_in[2 + j], shape_out[2 + j], kernel[j], stride[j], pads[2 * j], parts,
                         position(mesh, axes, rank)))
    if not any(dims):
        return None
    recv = [v for d in dims for v in (d.recv() if d else (0, 0))]  # top, bottom, left, right
    send = [v for d in dims for v in (d.send() if d else (0, 0))]
    new_pads = list(pads)
    for j, d in enumerate(dims):
        if d is not None:  # only the border ranks keep their outer pad
            if d.bias != 0:
                new_pads[2 * j] = 0
            if d.bias != d.parts - 1:
                new_pads[2 * j + 1] = 0
    # MindSpore's eight neighbour slots: top, top-right, right, bottom-right, bottom, bottom-left, left, top-left,
    # as (step along dimension 2, step along dimension 3, the lens entries that must both be non-zero)
    slots = ((-1, 0, (0,)), (-1, 1, (0, 3)), (0, 1, (3,)), (1, 1, (1, 3)), (1, 0, (1,)), (1, -1, (1, 2)),
             (0, -1, (2,)), (-1, -1, (0, 2)))

    def ids(lens: list[int]) -> list[int]:
        out = []
        for d2, d3, need in slots:
            moves = [(in_spec[2], d2), (in_spec[3], d3)]
            out.append(_moved(mesh, rank, moves) if all(lens[k] for k in need) else -1)
        return out

    attrs = {"send_rank_ids": str(ids(send)), "send_lens": str(send), "recv_rank_ids": str(ids(recv)),
             "recv_lens": str(recv),
             "data_format": str(node.attrs.get("data_format", "NCHW"))}
    return attrs, tuple(new_pads)

