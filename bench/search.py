"""Search time (issue 10): AUTO_PARALLEL's search on the GPT-style model of issue 9 at 2, 12 and 48 layers (goal:
48 layers <= 2x the 12-layer time, since repeated layers share one solution), and on 1,024 virtual devices vs 8.

Planning only (``graphpar.parallel.plan_for_devices``): trace + pipeline, no compile. ``search_s`` is the search pass
(problem build + HiGHS solve + provenance); ``plan_s`` the whole pipeline after tracing.

    python -m bench search
"""

from __future__ import annotations

import time


def _gpt_plan(layers: int, devices: int, search_mode: str = "recursive_programming") -> dict:
    import graphpar as ms
    from graphpar import nn
    from graphpar.parallel import plan_for_devices
    from graphpar.models.gpt import NONE, GPT, gpt_data

    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode=search_mode, full_batch=True)
    net = nn.WithLossCell(GPT(hints=NONE, layers=layers),
                          nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    ids, labels = gpt_data()
    started = time.perf_counter()
    summary = plan_for_devices(net, ids, labels, devices=devices, platform="gpu")
    total = time.perf_counter() - started
    search = summary.graph.plan.search
    seconds = summary.graph.plan.pass_seconds
    p = search.problem
    return {"layers": layers, "devices": devices, "nodes": len(summary.graph.order), "variables": p["variables"],
            "choices": p["choices"], "edges": p["edges"], "search_s": seconds["search"],
            "build_s": search.build_s, "solve_s": search.solve_s, "plan_s": sum(seconds.values()),
            "trace_and_plan_s": total, "optimal": search.optimal}


def bench_search() -> tuple[list[dict], list[dict]]:
    depth = [_gpt_plan(layers, 8) for layers in (2, 12, 48)]
    devices = [_gpt_plan(2, 8), _gpt_plan(2, 1024)]
    return depth, devices


def bench_search_memory() -> list[dict]:
    """Predicted per-device peak memory (the cost model the memory budget uses) against the compiled program's
    ``memory_analysis()`` (argument + output + temp - alias), for the 8-layer 1024-wide MLP under the hand plans
    and the searched plan, at batch 64 and 4,096. Compile only: nothing runs."""
    import graphpar as ms
    from graphpar.models.mlp import HAND_PLANS, mlp_data, mlp_train_cell, search_mlp
    from graphpar.planner.cost import predicted_peak
    from graphpar.planner.memory_model import compiled_peak_bytes

    rows = []
    for batch in (64, 4096):
        x, y = mlp_data(batch, 1024)
        for plan in [*HAND_PLANS, None]:
            ms.reset_auto_parallel_context()
            if plan:
                ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
            else:
                ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="dynamic_programming")
            train = mlp_train_cell(search_mlp(8, 1024, plan))
            graph = train.program.plan_graph([x, y])
            compiled = compiled_peak_bytes(train.program.lower_step([x, y]).compile().memory_analysis())
            predicted = predicted_peak(graph, graph.plan.mesh)
            rows.append({"model": "MLP 8x1024", "batch": batch, "plan": plan or "searched",
                         "predicted_mb": round(predicted / 1e6, 2), "compiled_mb": round(compiled / 1e6, 2),
                         "ratio": round(predicted / compiled, 3)})
    return rows
