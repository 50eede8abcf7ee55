"""``shard(fn, in_strategy, out_strategy=None, parameter_plan=None, device="Ascend", level=0)``: MindSpore 2.x's
``mindspore.shard`` / ``mindspore.parallel.shard`` for a Cell or a function (``graphpar.nn.shard`` says what it
builds).

A Cell is sharded in place (its ``Cell.shard``) and returned: calling it, at the top of a program or inside another
Cell's ``construct``, runs with the layout constraints, and its ``parameter_plan`` names its own Parameters. A
function gets a wrapper that applies them around each call inside a traced ``construct``; ``parameter_plan`` needs
a Cell (MindSpore refuses it for a function too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphpar.nn.cell import Cell
from graphpar.nn.shard import call_sharded, check_shard


def shard(fn: Callable, in_strategy: Any, out_strategy: Any = None, parameter_plan: Any = None,
          device: str = "Ascend", level: int = 0) -> Callable:
    if isinstance(fn, Cell):
        return fn.shard(in_strategy, out_strategy, parameter_plan, device, level)
    if parameter_plan is not None:
        raise TypeError(f"shard(): parameter_plan names Parameters of a Cell, but fn is {type(fn).__name__}; pass "
                        "the Cell that owns them")
    if not callable(fn):
        raise TypeError(f"shard(): fn must be a Cell or a function, got {type(fn).__name__}")
    spec = check_shard(in_strategy, out_strategy, None, device, level)

    def sharded(*args: Any) -> Any:
        return call_sharded(spec, fn, {}, args)

    return sharded
