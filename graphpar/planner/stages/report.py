"""How a stage search reads: the chosen plan's stage table (layers, recompute, time per micro-batch, memory), the
bubble, the step time, and the runners-up with what separates each from the chosen plan."""

from __future__ import annotations

from typing import Any

from graphpar.planner.stages.schedules import chunk_layers
from graphpar.planner.stages.search import StagePlan


def _gib(x: float) -> str:
    return f"{x / 2 ** 30:.2f} GiB"


def differences(plan: StagePlan, best: StagePlan) -> str:
    """What separates ``plan`` from ``best``: the settings that differ and the step time it loses."""
    a, b = plan.shape, best.shape
    parts = [f"{name} {getattr(a, attr)} (not {getattr(b, attr)})" for name, attr in (
        ("pp", "stages"), ("tp", "tp"), ("dp", "dp"), ("ep", "ep"), ("micro-batches", "micro_batches"), ("micro", "micro"),
        ("schedule", "schedule"), ("chunks per stage", "chunks"), ("optimizer sharding", "optimizer_shard"),
        ("sequence parallel", "seq_parallel"), ("weight-bounded layer plan", "weight_bound")) if getattr(a, attr) != getattr(b, attr)]
    if sum(plan.recompute) != sum(best.recompute):
        parts.append(f"recompute on {sum(plan.recompute)} stages (not {sum(best.recompute)})")
    why = []
    pipe = a.length * max(plan.stage_time)
    if pipe > b.length * max(best.stage_time) * (1 + 1e-9):
        why.append(f"pipeline {a.length:.4g} x slowest stage = {pipe:.4g} s")
    if max(plan.stage_time) > max(best.stage_time) * (1 + 1e-9):
        why.append(f"slowest stage {max(plan.stage_time) * 1e3:.4g} ms per micro-batch")
    if plan.bubble > best.bubble:
        why.append(f"bubble {plan.bubble:.1%}")
    if max(plan.reduce_time, default=0.0) > max(best.reduce_time, default=0.0) * (1 + 1e-9):
        why.append(f"dp gradient reduction {max(plan.reduce_time) * 1e3:.4g} ms per micro-batch")
    if plan.sync_time > best.sync_time:
        why.append(f"gradient sync {plan.sync_time * 1e3:.4g} ms")
    if max(plan.stage_memory) > max(best.stage_memory):
        why.append(f"peak {_gib(max(plan.stage_memory))}")
    loss = plan.step_time / best.step_time - 1 if best.step_time else 0.0
    return f"{', '.join(parts) or 'same shape'}: {loss:+.2%} step time ({'; '.join(why) or 'the same time'})"


def stage_text(report: Any) -> str:
    s = report.search
    budget = report.cluster.memory
    lines = [f"pipeline search: {report.n_layers} copies of {report.layer_scope.rsplit('/', 1)[-1]}, global batch "
             f"{report.global_batch}, {report.cluster.devices} devices ({report.cluster.node_size} per node), "
             f"budget {_gib(budget) if budget else 'none'}; {s.priced} shapes priced, {s.fitted} fit; CPU: profile "
             f"{report.profile_s:.2f} s, search {report.search_s:.2f} s"]
    best = s.best
    if best is None:
        lines.append("no pipeline plan fits the budget: raise max_device_memory or use more devices")
        return "\n".join(lines)
    lines.append("chosen: " + best.describe())
    v = best.shape.chunks
    form = "(p-1)/(m+p-1)" if v == 1 else f"(p-1)/({v}m+p-1)"
    lines.append(f"  predicted step {best.step_time:.4g} s = {best.shape.length:.4g} x "
                 f"{max(best.stage_time) * 1e3:.4g} ms (slowest stage per micro-batch, its dp gradient reduction "
                 f"included) + {best.sync_time * 1e3:.4g} ms gradient sync; bubble {form} = {best.bubble:.1%}")
    lines.append("  stage  layers  recompute  ms/micro-batch  (dp reduce)  memory")
    first = 0
    for i, (n, rc, t, m) in enumerate(zip(best.layers, best.recompute, best.stage_time, best.stage_memory)):
        red = best.reduce_time[i] if best.reduce_time else 0.0
        lines.append(f"  {i:<5}  {first}-{first + n - 1:<{5}}  {'full' if rc else 'none':<9}  {t * 1e3:<14.4g}  "
                     f"{red * 1e3:<11.4g}  {_gib(m)}")
        first += n
    if v > 1:
        lines.append("  chunks (stage.segment: layers) in model order: " + _chunks_text(best))
    if best.layer_plan:
        lines.append(f"  layer plan on tp {best.shape.tp}: {best.layer_plan}")
    for k, alt in enumerate(s.alternatives, 1):
        lines.append(f"  runner-up {k}: {alt.describe()}")
        lines.append(f"    vs chosen: {differences(alt, best)}")
    return "\n".join(lines)


def _chunks_text(plan: StagePlan) -> str:
    out, first = [], 0
    for group, segment, n in chunk_layers(plan.layers, plan.shape.chunks):
        out.append(f"{group}.{segment}: {first}-{first + n - 1}")
        first += n
    return ", ".join(out)


def plan_data(plan: StagePlan) -> dict[str, Any]:
    s = plan.shape
    return {"pipeline_interleave": s.chunks > 1, "chunks_per_stage": s.chunks,
            "chunk_layers": [list(c) for c in chunk_layers(plan.layers, s.chunks)],"pipeline_stages": s.stages, "tensor_parallel": s.tp, "data_parallel": s.dp, "expert_parallel": s.ep,
            "micro_batches": s.micro_batches, "micro_batch_sequences": s.micro, "schedule": s.schedule,
            "optimizer_shard": s.optimizer_shard, "sequence_parallel": s.seq_parallel,
            "layer_weight_bound": s.weight_bound, "layers_per_stage": list(plan.layers),
            "recompute": ["full" if r else "none" for r in plan.recompute],
            "stage_time_s": list(plan.stage_time), "stage_memory_bytes": list(plan.stage_memory),
            "sync_time_s": plan.sync_time, "reduce_time_s": list(plan.reduce_time), "bubble": plan.bubble, "step_time_s": plan.step_time,
            "layer_plan": plan.layer_plan}


def stage_data(report: Any) -> dict[str, Any]:
    s = report.search
    return {"layer": report.layer_scope, "layers": report.n_layers, "global_batch": report.global_batch,
            "devices": report.cluster.devices, "node_size": report.cluster.node_size,
            "budget_bytes": report.cluster.memory, "shapes_priced": s.priced, "shapes_fit": s.fitted,
            "profile_s": report.profile_s, "search_s": report.search_s,
            "chosen": None if s.best is None else plan_data(s.best),
            "alternatives": [{**plan_data(a), "vs_chosen": differences(a, s.best)} for a in s.alternatives]}


PIPELINE = "pipeline"  # the name `graphpar ir explain DIR pipeline` and PlanSummary.explain take for the stage search
FILE = "pipeline_search.json"  # what `graphpar plan --dump DIR` writes beside the begin dump (stage_data)


def _shape_text(p: dict[str, Any]) -> str:
    ep = f" (ep {p['expert_parallel']})" if p.get("expert_parallel", 1) > 1 else ""
    sp = " sp" if p.get("sequence_parallel") else ""
    return (f"pp {p['pipeline_stages']} x tp {p['tensor_parallel']}{sp} x dp {p['data_parallel']}{ep}, "
            f"{p['micro_batches']} x {p['micro_batch_sequences']}, {p['schedule']}"
            f"{' x %d chunks' % p['chunks_per_stage'] if p.get('chunks_per_stage', 1) > 1 else ''}"
            f"{', opt-sharded' if p['optimizer_shard'] else ''}")


def explain_text(data: dict[str, Any]) -> str:
    """Why the stage search chose its plan (``stage_data``: what ``graphpar plan --dump`` writes): the chosen plan
    and each runner-up side by side (step time and its parts: the pipeline's slowest stage per micro-batch, the
    bubble, the gradient sync; peak memory against the budget; recompute), then what separates each runner-up."""
    chosen = data["chosen"]
    budget = data["budget_bytes"]
    head = (f"pipeline search: {data['layers']} x {data['layer'].rsplit('/', 1)[-1]}, global batch "
            f"{data['global_batch']}, {data['devices']} devices, budget {_gib(budget) if budget else 'none'}; "
            f"{data['shapes_priced']} shapes priced, {data['shapes_fit']} fit")
    if chosen is None:
        return head + "\nno plan fits the budget: raise max_device_memory or use more devices"
    lines = [head, "  rank       shape                                            step s     slowest ms  bubble  "
                   "sync ms   peak        recompute"]
    for k, p in enumerate([chosen] + data["alternatives"]):
        rc = sum(r == "full" for r in p["recompute"])
        lines.append(f"  {'chosen' if k == 0 else f'runner-up {k}':<10} {_shape_text(p):<48} {p['step_time_s']:<10.4g} "
                     f"{max(p['stage_time_s']) * 1e3:<11.4g} {p['bubble']:<7.1%} {p['sync_time_s'] * 1e3:<9.4g} "
                     f"{_gib(max(p['stage_memory_bytes'])):<11} {rc}/{p['pipeline_stages']}")
    for k, p in enumerate(data["alternatives"], 1):
        lines.append(f"  runner-up {k} vs chosen: {p['vs_chosen']}")
    return "\n".join(lines)
