"""Predicted (cost model) against measured (compiled HLO) collective bytes of a train step, in wire bytes."""

from __future__ import annotations

from graphpar.dump.hlo import parse_collectives, wire_bytes
from graphpar import _context
from graphpar.planner.predict import predicted_bytes


def measured_bytes(hlo: str, n_devices: int, rank: int = 0) -> float:
    """Wire bytes rank ``rank`` sends per step: every collective of the compiled program, async pairs once."""
    return sum(wire_bytes(c.kind, c.nbytes, len(c.group_of(rank))) for c in parse_collectives(hlo, n_devices))


def predicted_and_measured(train, inputs) -> tuple[float, float]:
    """(predicted, measured) collective bytes per step of ``train`` (a TrainOneStepCell) on ``inputs``."""
    predicted, measured, _ = predicted_measured_hlo(train, inputs)
    return predicted, measured


def predicted_measured_hlo(train, inputs) -> tuple[float, float, str]:
    """(predicted, measured, compiled HLO text) of one train step."""
    graph = train.program.plan_graph(inputs)
    n = train.program.plan.n
    predicted = predicted_bytes(graph, _context.current_parallel().parallel_mode, n)
    hlo = train.program.lower_step(inputs).compile().as_text()
    return predicted, measured_bytes(hlo, n), hlo
