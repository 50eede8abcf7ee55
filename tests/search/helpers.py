"""Shared by the search tests: the hand-planned MLP of graphpar.models.mlp in a train cell, measured collective
bytes, losses and compiled memory."""

from __future__ import annotations

import graphpar as ms
from graphpar.models.mlp import mlp_train_cell, search_mlp


def mlp_train(plan=None, layers=8, width=1024, mode=None, **ctx):
    ms.reset_auto_parallel_context()
    if mode is None:
        mode = "auto_parallel" if plan is None else "semi_auto_parallel"
    ms.set_auto_parallel_context(parallel_mode=mode, **ctx)
    return mlp_train_cell(search_mlp(layers, width, plan))


def measured_bytes(train, inputs, rank=0) -> float:
    """Collective bytes per step one device sends (the project's unit), from the compiled train step's HLO."""
    from graphpar.dump.hlo import parse_collectives, wire_bytes

    hlo = train.program.lower_step(list(inputs)).compile().as_text()
    n = len(train.program.plan.devices)
    return sum(wire_bytes(c.kind, c.nbytes, len(c.group_of(rank))) for c in parse_collectives(hlo, n))


def losses(train, inputs, steps=3) -> list[float]:
    return [float(train(*inputs)) for _ in range(steps)]


def compiled_memory(train, inputs) -> int:
    """The compiled step's resident bytes per device, the quantity the memory model predicts."""
    from graphpar.planner.memory_model import compiled_peak_bytes

    return compiled_peak_bytes(train.program.lower_step(list(inputs)).compile().memory_analysis())
