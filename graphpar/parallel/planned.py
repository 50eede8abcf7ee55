"""SEMI_AUTO / AUTO parallel plans (placeholder until the propagation pass lands: data parallel, said aloud)."""

from __future__ import annotations

from graphpar._logging import notice_once
from graphpar.compile.plan import DataParallelPlan


def planned_plan(network, devices, pctx, n_virtual=None):
    notice_once("planned-fallback", f"parallel_mode={pctx.parallel_mode!r}: sharding propagation is not built yet; "
                "falling back to DATA_PARALLEL")
    return DataParallelPlan(devices, True, replicas=n_virtual)
