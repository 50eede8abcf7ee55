"""Passes ``apply_strategy_file`` and ``check_strategy_file``: force the plan a strategy file recorded.

``apply_strategy_file`` reads: the strategy file loaded into ``ctx.strategy_file`` (``strategy_ckpt_config
["load_file"]``), node keys (``parallel.strategy_file.node_keys``), rules, shapes, the mesh. Adds: on every node the
file names, the recorded strategy (provenance ``user``, detail ``strategy file <path>``), overriding a ``shard()``
hint that differs (with a warning). Propagation and the defaults then fill in the nodes the file does not name.
Errors: a recorded strategy that does not fit this job (another device count, another network) is a
:class:`~graphpar.errors.StrategyError` naming the op, the file and the fix.

``check_strategy_file`` (after ``place_parameters``) warns for every parameter whose storage layout differs from the
one recorded (the network changed since the file was written). Both passes do nothing without a loaded file.
"""

from __future__ import annotations

import dataclasses

from graphpar._logging import notice_once
from graphpar.errors import ConfigError, StrategyError
from graphpar.ir.graph import Graph, Provenance
from graphpar.planner.dims import shapes_of
from graphpar.planner.follow import follows_input
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.layout import is_layout_strategy
from graphpar.planner.layout_hint import check_layout_hint, place_layout_hint
from graphpar.planner.strategy import from_hint, strategy_text
from graphpar.planner.strategy_file import StrategyFile, match, mindspore_keys, node_keys

_EXAMPLES = 3  # names shown of a list in a message


def _some(names: tuple[str, ...]) -> str:
    shown = ", ".join(repr(n) for n in names[:_EXAMPLES])
    return shown + (f" and {len(names) - _EXAMPLES} more" if len(names) > _EXAMPLES else "") if names else "none"


def _check_names(graph: Graph, record: StrategyFile, purpose: str) -> None:
    """Refuse a file none of whose entries names an op or a parameter of this graph (it was written for another
    network: forcing nothing of it would plan as if no file were given); warn once, on a train step, for the
    entries a partly matching file names that the graph lacks (MindSpore warns "Not found strategy for" an op it
    cannot find in the file and falls back, so a partial match is not refused). A file whose parameters are all
    foreign is refused too: its matching op keys are scaffolding both networks share (the loss Cell). A forward
    graph's op keys sit under another root Cell than the train step's, so only its parameters are expected to
    match."""
    found = match(record, graph)
    if found.foreign:
        which = (f"none of its {found.entries} entries name an op or a parameter of this network" if not found.matched
                 else f"none of its {found.params} parameters is one of this network's ({found.matched} of its "
                      f"{found.entries} entries match, all ops)")
        raise ConfigError("set_auto_parallel_context", "strategy_ckpt_config", {"load_file": record.path},
                          reason=f"strategy file {record.path}: {which} (the file has ops "
                                 f"{_some(found.unmatched_ops)}, parameters {_some(found.unmatched_params)}; the "
                                 "network has ops "
                                 f"{_some(found.graph_ops)}, parameters {_some(found.graph_params)}); it was "
                                 "written for another network: load the file saved for this one (save_file) or "
                                 "drop load_file")
    if purpose == "train" and found.unmatched:
        notice_once(f"strategy-file-unmatched:{record.path}",
                    f"strategy file {record.path}: {found.matched} of its {found.entries} entries match this "
                    f"network; {len(found.unmatched)} name no op or parameter of it and are ignored: "
                    f"{_some(found.unmatched)}")


def apply_strategy_file(graph: Graph, ctx: PlanContext) -> Graph:
    record = ctx.strategy_file
    if record is None:
        return graph
    if record.device_num and record.device_num != ctx.mesh.n_devices:
        raise ConfigError("set_auto_parallel_context", "strategy_ckpt_config", {"load_file": record.path},
                          reason=f"strategy file {record.path} was written for {record.device_num} devices but "
                                 f"this job plans for {ctx.mesh.n_devices}; write a strategy file on "
                                 f"{ctx.mesh.n_devices} devices (save_file) or drop load_file")
    _check_names(graph, record, ctx.request.purpose)
    updates = {}
    keys, ms_keys = node_keys(graph), mindspore_keys(graph)
    for node in graph.node_list():
        recorded = record.strategies.get(keys[node.id]) or record.strategies.get(ms_keys.get(node.id, ""))
        if recorded is None or recorded.in_strategy is None or follows_input(node):
            continue
        dims = ctx.dims(node, graph)
        if dims is None:
            continue  # no sharding rule: replicated whatever the file says
        ins, outs = shapes_of(node, graph)
        given = recorded.in_layout or recorded.in_strategy
        probe = dataclasses.replace(node, hint=given, out_hint=recorded.out_layout or recorded.out_strategy)
        try:
            strategy = _placed(probe, dims, ins, outs, ctx)
        except StrategyError as exc:
            raise StrategyError(node.instance_name, recorded.in_strategy, f"recorded in {record.source} "
                                f"{record.path}, but it does not fit this job: {exc.reason}", node.scope,
                                record.fit_hint) from exc
        if node.hint is not None and _normal(node.hint) != _normal(given):
            notice_once(f"strategy-file:{keys[node.id]}", f"op '{node.instance_name}' (scope {node.scope}): "
                        f"shard({strategy_text(node.hint)}) is overridden by the strategy file {record.path}, which "
                        f"records {strategy_text(given)}")
        updates[node.id] = {"strategy": strategy, "provenance": Provenance("user",
                                                                           detail=f"{record.source} {record.path}")}
    return graph.with_annotations(updates)


def _normal(hint: tuple) -> tuple:
    return hint if is_layout_strategy(hint) else tuple(tuple(r) for r in hint)


def _placed(probe, dims, ins, outs, ctx: PlanContext):
    """The recorded strategy on this job's mesh: layouts on their own device-matrix axes, tuples as hints are."""
    if not is_layout_strategy(probe.hint):
        return from_hint(probe, dims, probe.hint, ins, outs, ctx.mesh)
    checked = check_layout_hint(probe, dims, probe.hint, probe.out_hint, ins, outs, ctx.mesh.n_devices)
    try:
        return place_layout_hint(dims, checked, ctx.mesh)
    except ValueError as exc:
        raise StrategyError(probe.instance_name, probe.hint, str(exc), probe.scope,
                            "Plan with the strategies the file was written with") from None


def check_strategy_file(graph: Graph, ctx: PlanContext) -> Graph:
    record = ctx.strategy_file
    if record is None:
        return graph
    specs = graph.plan.value_specs
    for vid in graph.inputs:
        value = graph.values[vid]
        layout = record.layouts.get(value.name)
        if value.kind != "param" or layout is None or layout.mesh_spec is None or vid not in specs:
            continue
        have = [list(axes) for axes in specs[vid]]
        if have != [list(axes) for axes in layout.mesh_spec]:
            notice_once(f"strategy-file-layout:{value.name}", f"Parameter '{value.name}' is stored as {have} but "
                        f"the strategy file {record.path} recorded {layout.mesh_spec}; the network changed since "
                        "the file was written")
    return graph
