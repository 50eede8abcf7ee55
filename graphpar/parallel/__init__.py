"""Parallel planning: strategies, rules, the pass pipeline, the cost model and the search; ``plan(...)`` shows a
plan in memory, ``plan_for_devices(...)`` makes one for a device count this machine does not have.

Both are loaded on first use, so importing ``graphpar.parallel`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plan", "plan_for_devices", "PlanSummary"]


def __getattr__(name: str) -> Any:
    if name == "plan":  # graphpar.parallel.plan(network_or_train_cell, *example_inputs)
        from graphpar.parallel.plan_api import plan

        return plan
    if name in ("plan_for_devices", "PlanSummary"):
        from graphpar.parallel.search import planning

        return getattr(planning, name)
    raise AttributeError(f"module 'graphpar.parallel' has no attribute {name!r}")
