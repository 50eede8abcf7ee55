"""graphpar.compile's :class:`~graphpar.common.api.GraphCompiler`: the engine side of MindSpore's
``_cell_graph_executor`` (``graphpar.common.api``), registered by the root ``graphpar/__init__.py``.

``compile`` plans a Cell for virtual devices (``plans.op_strategies.plan_cell``) and returns its strategy table and
parameter layouts; ``trained`` reads the graph a train cell's program last ran (the compile cache's, as
``graphpar.parallel.plan`` does), so ``_get_shard_strategy(model._train_network)`` and ``parameter_layout_dict``
after ``Model.train`` answer as MindSpore's do.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from graphpar import _context
from graphpar.common.api import CompiledCell
from graphpar.common.placeholder import check_call
from graphpar.compile.plans.op_strategies import plan_cell, strategy_table
from graphpar.compile.plans.parameter_layout import parameter_layout_dict
from graphpar.compile.runtime.program import TrainProgram
from graphpar.dump.parallel_graph import parallel_graph_info
from graphpar.ir.graph import Graph
from graphpar.nn.wrap import TrainOneStepCell
from graphpar.planner.optimizer_parallel import OptimizerParallelConfig


def _input_names(cell: Any, graph: Graph) -> dict[int, str]:
    """Graph-input value id -> the name MindSpore gives the graph parameter: the argument's name in the top Cell's
    ``construct`` when each argument is one tensor (tuples and keyword arguments keep graphpar's ``input{i}``)."""
    top = cell.network if isinstance(cell, TrainOneStepCell) else cell
    params = [p for p in inspect.signature(top.construct).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    data = [vid for vid in graph.inputs if graph.values[vid].kind == "input"]
    if len(data) > len(params):
        return {}
    return {vid: p.name for vid, p in zip(data, params)}


def _compiled(cell: Any, graph: Graph, top: str | None, with_graph: bool = False) -> CompiledCell:
    pctx = _context.current_parallel()
    train = isinstance(cell, TrainOneStepCell)
    network = cell.network if train else cell
    trainable = {p.name for p in network.trainable_params()}
    optimizer = OptimizerParallelConfig.from_context(pctx, network.trainable_params()) if train else None
    names = _input_names(cell, graph) if with_graph else None
    layouts = parameter_layout_dict(graph, graph.plan.mesh.n_devices, pctx.parallel_mode, trainable, optimizer, names)
    info = None
    if with_graph:
        rank = (pctx.global_rank or 0) % graph.plan.mesh.n_devices  # MindSpore compiles the rank the context names
        info = functools.partial(parallel_graph_info, graph, rank, names, pctx.full_batch,
                                 pctx.gradients_mean)
    return CompiledCell(strategy_table(graph, top), layouts, info)


class CellGraphCompiler:
    def compile(self, obj: Any, args: tuple) -> CompiledCell:
        signature = obj.get_inputs()
        if signature is not None:  # Cell.set_inputs: the signature is compiled (the arguments must match it)
            check_call(type(obj).__name__, signature, args)
            args = tuple(signature)
        graph = plan_cell(obj, args, one_rank=True)
        if graph is None:
            return CompiledCell()
        return _compiled(obj, graph, None if isinstance(obj, TrainOneStepCell) else type(obj).__name__, True)

    def trained(self, obj: Any) -> CompiledCell | None:
        if not isinstance(obj, TrainOneStepCell) or not isinstance(obj.program, TrainProgram):
            return None
        avals = obj.program.input_avals()
        if avals is None:
            return None
        graph = obj.program.plan_graph(avals)
        return None if graph is None else _compiled(obj, graph, None)
