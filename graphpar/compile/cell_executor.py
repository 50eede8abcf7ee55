"""graphpar.compile's :class:`~graphpar.common.api.GraphCompiler`: the engine side of MindSpore's
``_cell_graph_executor`` (``graphpar.common.api``), registered by the root ``graphpar/__init__.py``.

``compile`` plans a Cell for virtual devices (``plans.op_strategies.plan_cell``) and returns its strategy table;
``trained`` reads the graph a train cell's program last ran (the compile cache's, as ``graphpar.parallel.plan``
does), so ``_get_shard_strategy(model._train_network)`` after ``Model.train`` answers as MindSpore's does.
"""

from __future__ import annotations

from typing import Any

from graphpar.compile.plans.op_strategies import strategy_table, table_of_cell
from graphpar.compile.runtime.program import TrainProgram
from graphpar.nn.wrap import TrainOneStepCell


class CellGraphCompiler:
    def compile(self, obj: Any, args: tuple) -> dict[str, list]:
        return table_of_cell(obj, args)

    def trained(self, obj: Any) -> dict[str, list] | None:
        if not isinstance(obj, TrainOneStepCell) or not isinstance(obj.program, TrainProgram):
            return None
        avals = obj.program.input_avals()
        if avals is None:
            return None
        graph = obj.program.plan_graph(avals)
        return None if graph is None else strategy_table(graph)
