"""``graphpar.parallel.strategies(target, *example_inputs)``: each op's strategy, keyed as MindSpore keys it.

``{"Default/network-Net/MatMul-op0": [[2, 4], [4, 1]], ...}``: the op's Cell scope, kind and ``-op`` number (see
``graphpar.compile.plans.op_strategies``), and one list of splits per tensor input. A MindSpore test's assertions on
``_cell_graph_executor._get_shard_strategy(net)`` port to it unchanged (``re.search("MatMul-op", key)``).
"""

from __future__ import annotations

from typing import Any

from graphpar.compile.cell_executor import CellGraphCompiler
from graphpar.compile.plans.dry_run import PlanSummary
from graphpar.compile.plans.op_strategies import strategy_table, table_of_cell
from graphpar.ir.graph import Graph
from graphpar.nn.cell import Cell
from graphpar.parallel.plan_api import PlanError
from graphpar.train.model import Model


def strategies(target: Any, *example_inputs: Any) -> dict[str, list[list[int]]]:
    """The op strategies of ``target``:

    * a planned ``Graph`` or a ``PlanSummary`` (``plan_for_devices``): its own, scopes as graphpar names them;
    * a ``Model``, a ``TrainOneStepCell`` or any ``Cell`` with ``example_inputs``: planned now under the context in
      force for its ``device_num`` devices (none need exist): a train cell's train step, another Cell's forward;
    * a ``Model`` or ``TrainOneStepCell`` without inputs: the step its last training ran.

    Empty in STAND_ALONE and DATA_PARALLEL, which plan no op."""
    if isinstance(target, PlanSummary):
        return strategy_table(target.graph)
    if isinstance(target, Graph):
        return strategy_table(target)
    cell = target.train_network if isinstance(target, Model) else target
    if not isinstance(cell, Cell):
        raise PlanError(target, "expected a Model, a Cell, a planned Graph or a PlanSummary")
    if example_inputs:
        return table_of_cell(cell, example_inputs)
    found = CellGraphCompiler().trained(cell)
    if found is None:
        raise PlanError(target, "example inputs are needed: strategies(network, *inputs) (or train it first)")
    return found.strategies
