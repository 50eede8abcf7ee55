"""SAPP's strategy-generation rules that graphpar's ``recursive_programming`` applies as they are.

MindSpore's ``recursive_programming`` (SAPP, ``auto_parallel/rec_core``) partitions only the ops it has a cost model
for (MatMul, BatchMatMul, convolutions, pooling, BatchNorm, the batch-parallel losses) and then *generates* the
strategy of every other op from its neighbours (``rec_generate_strategy.cc``). For ``Gather`` the generated strategy
does not depend on the neighbours at all: ``PrepareGather`` discards the strategy it is handed and derives one from
the op's own shapes, so whatever the rest of the plan is, SAPP's Gather is this rule's. graphpar's
``recursive_programming`` therefore fixes each Gather to it (a constraint of the search, like a ``shard()`` hint)
and searches the rest (:mod:`.search_pass`); ``dynamic_programming`` searches the Gather too.

The rule (``PrepareGather``, ``GetGatherMode``), for ``n`` devices:

* ``axis == 0``: dimension 0 of the inputs is halved while it is even and fewer than ``n`` devices are used, the
  indices first, then the table; where that splits both the indices and the table's dimension 0 in a mode other
  than "batch and axis" (table ``(a, 1)`` and 2-D indices ``(b, 1)`` with ``a * b == n``) or "batch, axis and
  sequence" (2-D indices split on both dimensions), the table's split is dropped (MindSpore's ``SHARD_AXIS_0``
  modes do not split the indices);
* ``axis == 1`` on a 2-D table: the output's dimensions are halved the same way, dimension 0 first, then the others
  from the largest; the table takes the output's dimension 0 (its gathered axis stays whole) and the indices take
  the output's dimensions that came from them.

MindSpore refuses a Gather with another axis (or ``batch_dims > 1``) under SAPP; graphpar searches such a Gather as
``dynamic_programming`` would, and says so once.

``RmsNorm`` is the same kind of rule (``PrepareRmsNorm`` also discards the strategy it is handed): ``x``'s
dimension 0 split ``min(x.shape[0], n)`` ways, every other dimension whole, ``gamma`` as the trailing dimensions of
``x`` it matches. A split that does not fit the mesh (a dimension 0 that does not divide ``n``) is said once and
the op searched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from graphpar._logging import notice_once
from graphpar.ir.graph import Node

GATHER_KINDS = ("Gather",)
RMS_NORM_KINDS = ("RmsNorm",)


def _halve(sizes: list[int], order: Sequence[int], splits: list[int], used: int, n: int) -> int:
    """Halve ``sizes[i]`` for each ``i`` in ``order`` while it is even and fewer than ``n`` devices are used
    (SAPP's 2-part partitioning); returns the devices used."""
    for i in order:
        while sizes[i] > 0 and sizes[i] % 2 == 0 and used < n:
            sizes[i] //= 2
            used *= 2
            splits[i] *= 2
        if used == n:
            break
    return used


def _output_split(shape: Sequence[int], n: int) -> list[int]:
    """``GenGatherStra``: dimension 0 first, then the others from the largest (ties in order)."""
    rest = sorted(range(1, len(shape)), key=lambda i: -shape[i])
    splits = [1] * len(shape)
    _halve(list(shape), [0, *rest] if shape else [], splits, 1, n)
    return splits


def _axis0_mode_drops_table_split(table: list[int], indices: list[int], n: int) -> bool:
    """Whether MindSpore's ``GetGatherMode`` puts (table, indices) in a ``SHARD_AXIS_0`` mode (neither "batch and
    axis" nor "batch, axis and sequence"), where ``PrepareGather`` keeps the indices' split and drops the table's."""
    if table[0] == 1:
        return False  # NORMAL: nothing to drop
    two_d = len(table) == 2 and len(indices) == 2 and table[1] == 1
    if two_d and n not in (table[0], indices[0]) and indices[0] != 1 and indices[1] != 1:
        return False  # SHARD_BATCH_AXIS_AND_SP
    if two_d and indices[1] == 1 and table[0] * indices[0] == n and n not in (table[0], indices[0]):
        return False  # SHARD_BATCH_AND_AXIS
    return True


def gather_strategy(node: Node, ins: Sequence[Sequence[int]], outs: Sequence[Sequence[int]],
                    n_devices: int) -> tuple[tuple[int, ...], ...] | None:
    """SAPP's strategy for a ``Gather`` with table shape ``ins[0]`` and indices shape ``ins[1]`` on ``n_devices``
    devices (see the module docstring), or None where SAPP has no rule (said once)."""
    table, indices = list(ins[0]), list(ins[1])
    axis = node.static_args.get(2, 0)
    axis = axis + len(table) if axis < 0 else axis
    batch_dims = node.attrs.get("batch_dims", 0)
    if batch_dims > 1 or axis not in (0, 1) or (axis == 1 and len(table) != 2) or not table:
        notice_once(f"sapp-gather:{node.instance_name}:{node.scope}",
                    f"op '{node.instance_name}' (scope {node.scope or '(top level)'}): recursive_programming has no "
                    f"SAPP rule for a Gather with axis {axis}, batch_dims {batch_dims} and a table of rank "
                    f"{len(table)} (MindSpore refuses it); graphpar searches its strategy as dynamic_programming "
                    "does", logging.INFO)
        return None
    if axis == 0:
        splits = [[1] * len(table), [1] * len(indices)]
        used = 1
        for k in (1, 0):  # the indices first, then the table
            if splits[k]:
                used = _halve([ins[k][0]], [0], splits[k], used, n_devices)
            if used == n_devices:
                break
        if indices and max(splits[1]) > 1 and _axis0_mode_drops_table_split(splits[0], splits[1], n_devices):
            splits[0][0] = 1
        return tuple(tuple(s) for s in splits)
    out = _output_split(list(outs[0]), n_devices)
    return ((out[0], 1), tuple(out[1:1 + len(indices)]))


def rms_norm_strategy(ins: Sequence[Sequence[int]], n_devices: int) -> tuple[tuple[int, ...], ...]:
    """SAPP's strategy for an ``RmsNorm`` of ``x`` shaped ``ins[0]`` with ``gamma`` shaped ``ins[1]``
    (``PrepareRmsNorm``): ``x``'s dimension 0 split as far as the devices go, ``gamma`` as ``x``'s trailing
    dimensions."""
    x, gamma = list(ins[0]), list(ins[1])
    split = [1] * len(x)
    if x:
        split[0] = min(x[0], n_devices)
    return tuple(split), tuple(split[len(x) - len(gamma):]) if gamma else ()


def sapp_fixed_strategy(node: Node, ins: Sequence[Sequence[int]], outs: Sequence[Sequence[int]],
                        n_devices: int) -> tuple[tuple[int, ...], ...] | None:
    """The strategy SAPP gives ``node`` whatever its neighbours (a Gather's or an RmsNorm's, above), or None."""
    if node.kind in GATHER_KINDS and len(ins) >= 2 and outs:
        return gather_strategy(node, ins, outs, n_devices)
    if node.kind in RMS_NORM_KINDS and len(ins) == 2 and len(ins[1]) <= len(ins[0]):
        return rms_norm_strategy(ins, n_devices)
    return None
