"""The search prices everything with the one cost model (``graphpar.planner.cost``); this module names what it uses
so the search's modules import from one place."""

from __future__ import annotations

from graphpar.planner.cost import (
    DEFAULT_HW, HARDWARE, ZERO, Cost, Hardware, block_bytes, copy_memory, grad_values, input_bytes, op_cost,
    plan_cost, redistribution_cost)

__all__ = ["DEFAULT_HW", "HARDWARE", "ZERO", "Cost", "Hardware", "block_bytes", "copy_memory", "grad_values",
           "input_bytes", "op_cost", "plan_cost", "redistribution_cost"]
