"""``Model.infer_predict_layout``: the predict network's parameter layouts in MindSpore's dictionary format.

MindSpore returns ``predict_net.parameter_layout_dict``: for each Parameter name the list ``[device_arrangement,
tensor_map, slice_shape, field_size, uniform_split, opt_shard_group]``, the layout a distributed checkpoint is loaded
into (``load_distributed_checkpoint(net, files, predict_strategy=...)``). graphpar plans the predict network as
``Model.predict`` does (its forward program, for these inputs) and writes each Parameter's layout in that form:
``device_arrangement``/``tensor_map`` are MindSpore's device matrix and tensor map of the Parameter's layout on the
plan's mesh (``planner.tensor_layout.from_mesh_spec``; tensor maps count mesh dimensions from the right, -1 is
"not split"), ``slice_shape`` the block each device holds, ``field_size`` 0, ``uniform_split`` True (XLA splits
evenly), ``opt_shard_group`` "" (a forward program has no optimizer). As MindSpore's, the dictionary is empty outside
SEMI_AUTO / AUTO (no Parameter is split).
"""

from __future__ import annotations

from typing import Any

from graphpar.compile.plans.planned import Planned
from graphpar.planner.tensor_layout import from_mesh_spec


def _slice_shape(shape: tuple[int, ...], dev_matrix: list[int], tensor_map: list[Any]) -> list[int]:
    out = []
    for size, entry in zip(shape, tensor_map):
        entries = entry if isinstance(entry, (list, tuple)) else [entry]
        split = 1
        for e in entries:
            if e != -1:
                split *= dev_matrix[len(dev_matrix) - 1 - e]
        out.append(size // split)
    return out


def parameter_layouts(planned: Planned) -> dict[str, list[Any]]:
    """MindSpore's ``parameter_layout_dict`` of a planned forward graph (see the module docstring)."""
    graph = planned.graph
    if graph is None:
        return {}
    mesh = graph.plan.mesh
    specs = graph.plan.value_specs
    layouts: dict[str, list[Any]] = {}
    for vid in graph.inputs:
        value = graph.values[vid]
        if value.kind != "param":
            continue
        if vid in specs:
            dev_matrix, tensor_map = from_mesh_spec([list(a) for a in specs[vid]], mesh.names, mesh.sizes)
        else:
            dev_matrix, tensor_map = [mesh.n_devices], [-1] * len(value.shape)
        layouts[value.name] = [list(dev_matrix), list(tensor_map), _slice_shape(tuple(value.shape), dev_matrix,
                                                                                 tensor_map), 0, True, ""]
    return layouts
