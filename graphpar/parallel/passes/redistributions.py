"""Pass ``report_redistributions``: one warning per redistribution the plan inserts (SEMI_AUTO / AUTO).

MindSpore logs "Inconsistency occurred at edge" when an op's input layout differs from the layout its producer
gives; graphpar warns the same way, one line per edge, with the bytes each device moves for it (forward and
backward, wire bytes, ``graphpar.parallel.cost``). Free redistributions (a slice whose cotangent needs no gather)
are not reported.

Reads: node strategies, ``graph.meta["value_specs"]`` (storage layouts of parameters and inputs). Adds:
``graph.meta["redistributions"]`` (one record per priced edge, for dumps and tools). Changes no strategy.
"""

from __future__ import annotations

import dataclasses

from graphpar._logging import notice_once
from graphpar.dump.format import spec_text
from graphpar.ir.graph import Graph
from graphpar.parallel.cost import grad_values, redistribution_cost
from graphpar.parallel.passes.context import PlanContext


def report_redistributions(graph: Graph, ctx: PlanContext) -> Graph:
    specs = graph.meta.get("value_specs", {})
    grads = grad_values(graph)
    records = []
    for node in graph.node_list():
        for k, vid in enumerate(node.inputs):
            value = graph.values[vid]
            if not value.is_array:
                continue
            if value.producer is not None:
                producer = graph.nodes[value.producer]
                src = producer.strategy.output_spec(producer.outputs.index(vid))
                origin = f"'{producer.instance_name}'"
            elif vid in specs:
                src, origin = specs[vid], f"{value.kind} '{value.name}'" if value.name else value.kind
            else:
                continue
            dst = node.strategy.input_spec(k)
            cost = redistribution_cost(value, src, dst, ctx.mesh, needs_grad=vid in grads)
            if src == dst or cost.comm_bytes <= 0:
                continue
            records.append({"node": node.id, "input": k, "value": vid, "from": src, "to": dst,
                            "bytes": cost.comm_bytes, "messages": cost.messages})
            notice_once(f"redistribution:{graph.name}:{node.scope}/{node.instance_name}#{node.id}:{k}:{src}:{dst}",
                        f"redistribution inserted at edge {origin} -> '{node.instance_name}' input {k} (scope "
                        f"{node.scope or '(top level)'}): tensor {tuple(value.shape)} from {spec_text(src)} to "
                        f"{spec_text(dst)}, {cost.comm_bytes:g} B per device per step ({cost.messages} "
                        f"collective{'s' if cost.messages != 1 else ''})")
    return dataclasses.replace(graph, meta={**graph.meta, "redistributions": records})
