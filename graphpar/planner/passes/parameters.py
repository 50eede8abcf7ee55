"""Pass ``place_parameters``: every trainable Parameter is stored in the layout its consumer needs.

Reads: node strategies. Adds: ``graph.plan.value_specs`` (storage layout of every param/state/input value) and
``graph.plan.param_conflicts`` (one report per Parameter whose consumers want different layouts).

A Parameter read by several nodes that want different layouts is stored in the layout, among those its ops want,
that minimizes the bytes redistributed to all of them (JAX's own equations, such as the backward of a gradient
taken inside ``construct``, take it as the ops store it: MindSpore lays a Parameter out by its operators'
strategies before it derives the backward), and the choice is reported (begin dump; a warning too when it costs any bytes). If
two *user-hinted* ops demand different layouts of one Parameter, that is MindSpore's "strategies of a shared
parameter must agree" error: a :class:`~graphpar.errors.StrategyError` names both ops, their strategies and what
would be valid. Non-trainable state (BatchNorm statistics, keys, constants) is stored replicated and sliced where read.

A layout constraint read by a Parameter (``Reshard``: ``reshard(param, layout)``, or ``shard(cell,
parameter_plan=...)``) is the Parameter's layout: it is stored so, whatever its other consumers would prefer (they
get it redistributed, reported as above); a user-hinted consumer that disagrees is the error above.
"""

from __future__ import annotations

import logging

from graphpar._logging import notice_once
from graphpar.errors import StrategyError
from graphpar.ir.graph import Graph
from graphpar.planner.cost import redistribution_bytes, replicated_spec
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.strategy import strategy_text

PIN_KIND = "Reshard"  # ops.layout_ops.Reshard: a layout constraint


def _from_file(node) -> bool:
    return node.provenance.detail.startswith("strategy file")


def _recorded_spec(ctx: PlanContext, name: str, distinct: list) -> tuple | None:
    """The storage layout a loaded strategy file records for Parameter ``name``, when it is one its readers
    want (None: no file, no entry, or another layout)."""
    record = ctx.strategy_file
    layout = None if record is None else record.layouts.get(name)
    if layout is None or layout.mesh_spec is None:
        return None
    spec = tuple(tuple(axes) for axes in layout.mesh_spec)
    return spec if spec in distinct else None


def place_parameters(graph: Graph, ctx: PlanContext) -> Graph:
    specs: dict[int, tuple] = {}
    conflicts = []
    costly: dict[str, list[tuple]] = {}  # reader ops -> (Parameter, bytes, layout) of those stored at a cost
    for vid in graph.inputs:
        value = graph.values[vid]
        if value.kind == "input":
            specs[vid] = ctx.input_specs.get(vid, replicated_spec(len(value.shape)))
            continue
        if value.kind != "param" or not value.is_array:
            specs[vid] = replicated_spec(len(value.shape))
            continue
        wants = [(node, k, node.strategy.input_spec(k)) for node, k in graph.consumers(vid)]
        distinct = list(dict.fromkeys(spec for _, _, spec in wants))
        if len(distinct) <= 1:
            specs[vid] = distinct[0] if distinct else replicated_spec(len(value.shape))
            continue
        # MindSpore's ops decide; JAX's own equations (the backward of a gradient taken inside construct, which
        # MindSpore derives from the ops after planning) read the Parameter as the ops store it
        deciding = list(dict.fromkeys(spec for n, _, spec in wants if n.is_op)) or distinct
        # a loaded strategy file records every reader's strategy and the layout the Parameter was stored in
        # (what the plan it was written from chose): its readers are not conflicting hints, its layout is kept
        recorded = _recorded_spec(ctx, value.name, distinct)
        hinted = [(n, k, s) for n, k, s in wants if n.provenance is not None and n.provenance.kind == "user"
                  and not _from_file(n)]
        pinned = [s for n, _, s in hinted if n.kind == PIN_KIND]
        if len({s for _, _, s in hinted}) > 1:
            (a, ka, _), (b, kb, _) = hinted[0], next(h for h in hinted[1:] if h[2] != hinted[0][2])
            raise StrategyError(
                b.instance_name, b.hint,
                f"Parameter '{value.name}' {value.shape} is input {kb} of '{b.instance_name}' split as "
                f"{b.strategy.in_strategy()[kb]} but input {ka} of '{a.instance_name}' (scope {a.scope}, strategy "
                f"{strategy_text(a.hint or a.strategy.in_strategy())}) split as {a.strategy.in_strategy()[ka]}; a shared Parameter needs one layout",
                b.scope, f"Give both ops the same split for '{value.name}' (e.g. {a.strategy.in_strategy()[ka]}), or "
                "remove one hint and let propagation resolve it by cost")

        def cost(spec):
            return sum(redistribution_bytes(spec, s, value.shape, value.itemsize, ctx.mesh) for _, _, s in wants)

        searched = graph.plan.search.storage.get(vid) if graph.plan.search is not None else None  # the search priced this choice
        best = pinned[0] if pinned else recorded if recorded is not None else searched if searched is not None else min(
            deciding, key=lambda s: (cost(s), deciding.index(s)))
        specs[vid] = best
        report = {"parameter": value.name, "chosen": best, "cost_bytes": cost(best),
                  "wanted": [(n.instance_name, n.id, s) for n, _, s in wants]}
        conflicts.append(report)
        if not cost(best):
            continue  # slicing a replicated value costs nothing: recorded for the dump, not worth a warning
        readers = ", ".join(n.instance_name for n, _, _ in wants)
        notice_once(f"param-conflict-each:{value.name}", f"Parameter '{value.name}' is read by {readers} in "
                    f"different layouts; it is stored as {best} and redistributed for the others ({cost(best):g} "
                    "bytes per device per step)", logging.DEBUG)
        costly.setdefault(readers, []).append((value.name, cost(best), best))
    _warn_conflicts(costly)
    return graph.with_plan(value_specs=specs, param_conflicts=tuple(conflicts))


def _warn_conflicts(costly: dict[str, list[tuple]]) -> None:
    """One warning per set of reader ops (the 27 BatchNorms of a ResNet-50 are one line, not 54); each Parameter's
    own line is at DEBUG, and every conflict is in the begin dump."""
    for readers, params in costly.items():
        if len(params) == 1:
            name, nbytes, best = params[0]
            notice_once(f"param-conflict:{name}", f"Parameter '{name}' is read by {readers} in different layouts; "
                        f"it is stored as {best} and redistributed for the others ({nbytes:g} bytes per device per "
                        "step)")
            continue
        names = [p[0] for p in params]
        notice_once(f"param-conflict:{readers}:{names[0]}:{names[-1]}:{len(names)}",
                    f"{len(names)} Parameters ({names[0]} ... {names[-1]}) are each read by {readers} in different "
                    "layouts; each is stored in the layout that costs least and redistributed for the others "
                    f"({sum(p[1] for p in params):g} bytes per device per step in all). Each Parameter: the graphpar "
                    "logger at DEBUG, or the step_parallel_begin dump")
