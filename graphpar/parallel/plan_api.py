"""``graphpar.parallel.plan(network_or_train_cell, *example_inputs)``: a plan in memory, as its dumps describe it.

A thin adapter over the public compile entry points: ``TrainProgram.stages`` for a train cell (the compile cache's
program, the one ``Model.train`` runs), ``ForwardProgram.planned`` / ``lower`` for any other Cell (its shared
program, as ``net(x)`` and ``Model.eval`` use). The planned graph and the compiled HLO are turned into dump *text*
by the dump writer's own functions and parsed by the dump reader, so a PlanView, the files ``save_graphs`` writes and
``graphpar ir`` agree by construction (one source of truth). With ``save_graphs`` on, the dumps are written as
well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphpar import _context
from graphpar._context import PYNATIVE_MODE
from graphpar.compile.runtime.forward import program_for
from graphpar.compile.runtime.per_rank_train import PerRankTrainProgram
from graphpar.dump.loading import DumpSet
from graphpar.dump.reader import parse_text
from graphpar.dump.writer import begin_texts, dump_index, dump_path, execute_texts, maybe_dump_execute
from graphpar.errors import GraphparError
from graphpar.nn.cell import Cell
from graphpar.nn.wrap import TrainOneStepCell
from graphpar.train.model import Model
from graphpar.viz.plan import PlanView


class PlanError(GraphparError, ValueError):
    """``graphpar.parallel.plan`` cannot show a plan for ``target``: ``reason`` says why and what would work."""

    def __init__(self, target: Any, reason: str):
        self.target, self.reason = target, reason
        super().__init__(f"graphpar.parallel.plan({type(target).__name__}): {reason}")


def _program_and_inputs(target: Any, inputs: tuple) -> tuple[Any, str, list]:
    """The program that plans ``target``, its purpose (train / forward) and the example inputs to plan for."""
    if isinstance(target, Model):
        train = target.train_network
        if not isinstance(train, TrainOneStepCell):
            raise PlanError(target, "the Model has no optimizer, so it compiles no train step; pass the network and "
                                    "example inputs to see its forward plan")
        program = train.program
        if not inputs:
            avals = program.input_avals()
            if avals is None:
                raise PlanError(target, "Model.train has not run a step yet; train first, or pass example inputs "
                                        "(a batch: data and label)")
            inputs = tuple(np.zeros(a.shape, a.dtype) for a in avals)
        return program, "train", list(inputs)
    if isinstance(target, TrainOneStepCell):
        if not inputs:
            raise PlanError(target, "example inputs are needed: plan(train_cell, data, label)")
        return target.program, "train", list(inputs)
    if isinstance(target, Cell):
        if not inputs:
            raise PlanError(target, "example inputs are needed: plan(network, *inputs)")
        return program_for(target), "forward", list(inputs)
    raise PlanError(target, "expected a Model, a TrainOneStepCell or a Cell")


def _refuse_per_rank(target: Any, program: Any) -> None:
    if isinstance(program, PerRankTrainProgram):
        raise PlanError(target, "parallel_mode=STAND_ALONE with collective ops in construct trains once per rank, "
                                "construct run as written on whole tensors: nothing is planned. For a planned step, "
                                "use SEMI_AUTO_PARALLEL or AUTO_PARALLEL with shard() strategies in place of the "
                                "collectives")


def _xla_memory(compiled: Any) -> dict[str, int] | None:
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return {"argument bytes": int(analysis.argument_size_in_bytes),
            "output bytes": int(analysis.output_size_in_bytes),
            "temp bytes": int(analysis.temp_size_in_bytes),
            "generated code bytes": int(analysis.generated_code_size_in_bytes)}


def plan(target: Any, *example_inputs: Any) -> PlanView:
    """The plan of ``target`` for ``example_inputs`` (a :class:`graphpar.viz.plan.PlanView`).

    * a ``Model``: its train step, the very program ``Model.train`` runs; without inputs, for the batch shape of
      the last step it trained;
    * a ``TrainOneStepCell``: its train step for the batch ``example_inputs`` (data and label);
    * any other ``Cell``: its forward pass (what evaluation and prediction compile).

    The step is planned with the context in force (parallel mode, hints, strategy files) and compiled (not run),
    so the plan has per-device shapes and the collectives XLA inserted, on every rank.
    """
    if _context.current().mode == PYNATIVE_MODE:
        raise PlanError(target, "PYNATIVE_MODE runs the network eagerly and plans nothing; "
                                "set_context(mode=GRAPH_MODE) to plan it")
    program, purpose, inputs = _program_and_inputs(target, example_inputs)
    _refuse_per_rank(target, program)
    if purpose == "train":
        stages = program.stages(inputs)  # the compile cache's program: the one Model.train runs
        graph, compiled = stages.planned.graph, stages.compiled.executable
    else:
        graph = program.planned(*inputs).graph
        compiled = program.lower(*inputs).compile()
    exec_plan = program.plan
    if graph is None or compiled is None:
        raise PlanError(target, "this execution plan has no planned graph")
    hlo = compiled.as_text()
    maybe_dump_execute(graph, exec_plan, hlo)  # save_graphs: the files match what this PlanView holds
    ranks = list(range(exec_plan.n))
    index = dump_index(graph)
    ctx = _context.current()
    where = ctx.save_graphs_path if ctx.save_graphs else "<in memory>"
    begins, executes = begin_texts(graph, exec_plan, ranks), execute_texts(graph, exec_plan, hlo, ranks)
    sets = {}
    for r in ranks:
        begin = parse_text(begins[r], str(dump_path(where, r, "step_parallel_begin", index)))
        execute = parse_text(executes[r], str(dump_path(where, r, "execute", index)))
        sets[r] = DumpSet(str(where), index, begin, execute, indexes=[index], ranks=ranks)
    return PlanView(sets, str(where), _xla_memory(compiled))

