"""Parallel planning: strategies, rules, the pass pipeline, the cost model and the search.

``plan_for_devices`` (plans for device counts this machine does not have) is loaded on first use, so importing
``graphpar.parallel`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plan_for_devices", "PlanSummary"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from graphpar.parallel.search import planning

        return getattr(planning, name)
    raise AttributeError(f"module 'graphpar.parallel' has no attribute {name!r}")
