"""Wire bytes: the cost model's unit of communication, and the one the execute dumps measure.

``wire_bytes`` is the bytes one device sends for a collective under ring algorithms. The cost model prices plans in
it (``graphpar.planner.cost``) and the dump writer counts the collectives XLA compiled in it (``graphpar.dump.hlo``
re-exports it), so a prediction and a measurement compare directly. It lives here, with the cost model, because
the planner sits below the dumps.
"""

from __future__ import annotations

# the collectives, in MindSpore's spelling (graphpar.dump.hlo maps XLA's names onto these)
COLLECTIVE_KINDS = ("AllReduce", "AllGather", "ReduceScatter", "AlltoAll", "CollectivePermute", "Broadcast")


def wire_bytes(kind: str, result_bytes: float, group_size: int) -> float:
    """Bytes one device sends for a collective under ring algorithms: the project's unit of "collective bytes".

    ``kind`` is the MindSpore spelling (AllReduce, AllGather, ReduceScatter, AlltoAll, CollectivePermute,
    Broadcast), ``result_bytes`` the per-device result size R, ``group_size`` g: AllReduce 2(g-1)/g R, AllGather
    (g-1)/g R, ReduceScatter (g-1) R (its input is g R), AlltoAll (g-1)/g R, CollectivePermute and Broadcast R;
    a group of one moves nothing.
    """
    g = int(group_size)
    if g <= 1:
        return 0.0
    if kind == "AllReduce":
        return 2.0 * (g - 1) / g * result_bytes
    if kind in ("AllGather", "AlltoAll"):
        return (g - 1) / g * result_bytes
    if kind == "ReduceScatter":
        return float(g - 1) * result_bytes
    if kind in ("CollectivePermute", "Broadcast"):
        return float(result_bytes)
    raise ValueError(f"wire_bytes: unknown collective kind {kind!r} (expected one of {sorted(COLLECTIVE_KINDS)})")
