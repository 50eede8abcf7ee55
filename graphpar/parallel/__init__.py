"""Parallel planning: strategies, rules, the pass pipeline; ``plan(...)`` shows a plan in memory.

``plan`` is loaded on first use, so importing ``graphpar.parallel`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plan"]


def __getattr__(name: str) -> Any:
    if name == "plan":  # graphpar.parallel.plan(network_or_train_cell, *example_inputs)
        from graphpar.parallel.plan_api import plan

        return plan
    raise AttributeError(f"module 'graphpar.parallel' has no attribute {name!r}")
