"""The per-row callables that pipeline operations hand to grain.

They are small classes rather than closures so that a pipeline pickles into grain's worker processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphpar.dataset._rows import Row, stack_rows
from graphpar.dataset.transforms._base import is_random, run_ops
from graphpar.errors import DatasetError


def _op_name(op: Any) -> str:
    return type(op).__name__ if not hasattr(op, "__qualname__") else op.__qualname__


class ApplyOps:
    """``map``: run ``ops`` on the columns at ``in_pos`` and lay the results out as MindSpore does.

    Same number of outputs as inputs: each output takes its input's place. Otherwise the outputs come first, then
    the columns the map did not read, in their order.
    """

    def __init__(self, ops: Sequence[Callable[..., Any]], in_pos: tuple[int, ...], n_out: int, replace: bool,
                 keep_pos: tuple[int, ...], in_names: Sequence[str], out_names: Sequence[str]):
        self.ops, self.in_pos, self.n_out = list(ops), in_pos, n_out
        self.replace, self.keep_pos = replace, keep_pos
        self.in_names, self.out_names = list(in_names), list(out_names)

    def prefix(self, n: int) -> ApplyOps:
        """The same map with only its first ``n`` operations (the rest run per batch, ``dataset._batched``)."""
        return ApplyOps(self.ops[:n], self.in_pos, self.n_out, self.replace, self.keep_pos, self.in_names,
                        self.out_names)

    def uses_rng(self) -> bool:
        """Whether any operation draws from the per-sample generator (only graphpar's random transforms can)."""
        return any(is_random(op) for op in self.ops)

    def describe(self) -> str:
        return f"map([{', '.join(_op_name(op) for op in self.ops)}]) on columns {self.in_names}"

    def __call__(self, row: Row, rng: np.random.Generator) -> Row:
        cols = tuple(row[i] for i in self.in_pos)
        try:
            out = run_ops(self.ops, cols, rng)
        except DatasetError as exc:
            raise DatasetError(f"{self.describe()}: {exc}") from exc
        except Exception as exc:
            raise DatasetError(f"{self.describe()} failed: {type(exc).__name__}: {exc}") from exc
        if len(out) != self.n_out:
            raise DatasetError(f"{self.describe()}: the operations returned {len(out)} column(s) but output_columns "
                               f"names {self.n_out} ({self.out_names}); name one output column per returned value")
        if self.replace:
            new = list(row)
            for p, value in zip(self.in_pos, out):
                new[p] = value
            return tuple(new)
        return tuple(out) + tuple(row[i] for i in self.keep_pos)


class Select:
    """``project``: keep the columns at ``pos``, in that order."""

    def __init__(self, pos: tuple[int, ...]):
        self.pos = pos

    def __call__(self, row: Row) -> Row:
        return tuple(row[i] for i in self.pos)


class StackRows:
    """``batch``: stack rows column by column (grain's ``batch_fn``); with ``batch_ops`` (``dataset._batched``), the
    stacking and the operations moved to the batch are theirs."""

    def __init__(self, columns: Sequence[str], batch_ops: Callable[[Sequence[Row]], Row] | None = None,
                 describe: str = ""):
        self.columns = list(columns)
        self.batch_ops, self.describe = batch_ops, describe

    def __call__(self, rows: Sequence[Row]) -> Row:
        if self.batch_ops is None:
            return stack_rows(rows, self.columns)
        try:
            return self.batch_ops(rows)
        except DatasetError as exc:
            raise DatasetError(f"{self.describe}: {exc}") from exc
        except Exception as exc:
            raise DatasetError(f"{self.describe} failed: {type(exc).__name__}: {exc}") from exc
