"""MindSpore's Cell containers: ``SequentialCell`` (calls its cells in order) and ``CellList`` (holds them by index).

Apart from ``Cell`` itself (graphpar/nn/cell.py) because they are Cells like any user's, built only on its public
surface.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from graphpar.errors import CellError
from graphpar.nn.cell import Cell


class _IndexedCells(Cell):
    """What both containers share: their child Cells by position (named "0", "1", ... when appended)."""

    def __getitem__(self, index: int) -> Cell:
        return self.cells()[index]

    def __len__(self) -> int:
        return len(self._cell_order)

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells())

    def append(self, cell: Cell) -> None:
        setattr(self, str(len(self._cell_order)), cell)


class SequentialCell(_IndexedCells):
    """``SequentialCell([cell, ...])`` or ``SequentialCell(OrderedDict(...))``: calls its cells in order."""

    def __init__(self, *args: Any):
        super().__init__()
        cells = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple, dict)) else args
        items = cells.items() if isinstance(cells, dict) else ((str(i), c) for i, c in enumerate(cells))
        for name, cell in items:
            if not isinstance(cell, Cell):
                raise TypeError(f"SequentialCell holds Cells only, got {type(cell).__name__} at {name!r}")
            setattr(self, name, cell)

    def construct(self, x: Any) -> Any:
        for cell in self.cells():
            x = cell(x)
        return x


class CellList(_IndexedCells):
    """``CellList([cell, ...])``: holds Cells by index; ``construct`` is yours to write around it."""

    def __init__(self, cells: Any = None):
        super().__init__()
        for cell in cells or []:
            self.append(cell)

    def extend(self, cells: Any) -> None:
        for cell in cells:
            self.append(cell)

    def construct(self, *inputs: Any) -> Any:
        raise CellError("CellList has no construct(): iterate over it inside your own Cell's construct")
