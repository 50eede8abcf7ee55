"""Passes ``choose_mesh`` and ``dataset_layouts``: the mesh a graph is planned on, and the layouts its batch
inputs arrive in. They come first in the SEMI_AUTO / AUTO / HYBRID pass lists (``planner.planning``), so every
later pass reads both from the context.

``choose_mesh`` reads: the hints' device matrices as ``read_hints`` recorded them (``graph.plan.hints``, from
``strategy.hint_device_matrix``: with the repeat dimension), the request's device count and the graph's mesh so far
(a program's mesh, fixed by its first graph). Adds:
``graph.plan.mesh``, the common refinement of the matrices (``planner.mesh.mesh_axis_sizes``). A hint that does
not fit the device count is left to ``apply_hints``, which says why. Errors: a :class:`ConfigError` when the graph
needs a mesh other than the program's.

``dataset_layouts`` reads: the mesh, the request's ``dataset_strategy``, the shapes of the graph's batch inputs.
Adds: ``graph.plan.input_specs`` (input value id -> layout). Errors: a :class:`ConfigError` for a
``dataset_strategy`` that does not fit the inputs or the devices.
"""

from __future__ import annotations

from typing import Any

from graphpar.errors import ConfigError
from graphpar.ir.graph import Graph, MeshInfo, Spec
from graphpar.planner.mesh import axis_names, mesh_axis_sizes
from graphpar.planner.passes.context import PlanContext


def hint_matrices(graph: Graph) -> list[tuple[str, tuple[int, ...]]]:
    """Per hinted op that fits the device count, its description and its device matrix (with repeat), as
    ``read_hints`` recorded them."""
    out = []
    for node in graph.node_list():
        read = graph.plan.hints.get(node.id)
        if read is not None and read.device_matrix is not None:
            out.append((f"'{node.instance_name}' {read.text} ({node.scope})", read.device_matrix))
    return out


def choose_mesh(graph: Graph, ctx: PlanContext) -> Graph:
    hinted = hint_matrices(graph)
    sizes = mesh_axis_sizes(ctx.request.devices, [m for _, m in hinted], [o for o, _ in hinted])
    mesh = MeshInfo(axis_names(len(sizes)), sizes)
    if graph.plan.mesh is not None and graph.plan.mesh != mesh:
        raise ConfigError("set_auto_parallel_context", "parallel_mode", ctx.mode,
                          reason="the network's strategies need a different device mesh for another input "
                                 "shape or training mode; graphpar keeps one mesh per program")
    return graph.with_plan(mesh=mesh)


def dataset_specs(graph: Graph, mesh: MeshInfo, dataset_strategy: Any) -> dict[int, Spec]:
    """The layout each graph input arrives in: split over the devices by ``dataset_strategy``."""
    inputs = [v for v in graph.inputs if graph.values[v].kind == "input"]
    api = "set_auto_parallel_context"
    if isinstance(dataset_strategy, tuple) and len(dataset_strategy) != len(inputs):
        raise ConfigError(api, "dataset_strategy", dataset_strategy,
                          reason=f"dataset_strategy has {len(dataset_strategy)} entries but the network takes "
                                 f"{len(inputs)} inputs")
    specs: dict[int, Spec] = {}
    for k, vid in enumerate(inputs):
        shape = graph.values[vid].shape
        if isinstance(dataset_strategy, tuple):
            splits = dataset_strategy[k]
            if len(splits) != len(shape):
                raise ConfigError(api, "dataset_strategy", dataset_strategy,
                                  reason=f"entry {k} {splits} does not match input {k}'s rank (shape {shape})")
            names, spec = list(mesh.names), []
            for d, (s, size) in enumerate(zip(splits, shape)):
                taken, acc = [], 1
                while acc < s and names:
                    taken.append(names.pop(0))
                    acc *= mesh.size(taken[-1:])
                if acc != s or size % s:
                    raise ConfigError(api, "dataset_strategy", dataset_strategy,
                                      reason=f"input {k} dim {d} (size {size}) cannot be split {s} on "
                                             f"{mesh.n_devices} devices")
                spec.append(tuple(taken))
            specs[vid] = tuple(spec)
        elif dataset_strategy == "full_batch" or not shape:
            specs[vid] = tuple(() for _ in shape)
        else:
            names = list(mesh.names)
            while names and shape[0] % mesh.size(tuple(names)):
                names.pop()
            specs[vid] = (tuple(names),) + tuple(() for _ in shape[1:])
    return specs


def dataset_layouts(graph: Graph, ctx: PlanContext) -> Graph:
    return graph.with_plan(input_specs=dataset_specs(graph, ctx.mesh, ctx.request.dataset_strategy))
