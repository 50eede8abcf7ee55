"""``Model.infer_predict_layout``: the predict network's parameter layouts in MindSpore's dictionary format.

MindSpore returns ``predict_net.parameter_layout_dict``: for each Parameter name the list ``[device_arrangement,
tensor_map, slice_shape, field_size, uniform_split, opt_shard_group]``, the layout a distributed checkpoint is loaded
into (``load_distributed_checkpoint(net, files, predict_strategy=...)``). graphpar plans the predict network as
``Model.predict`` does (its forward program, for these inputs) and writes each Parameter's layout in that form
(``compile.plans.parameter_layout``: the same dictionary ``Cell.parameter_layout_dict`` gives after a compile); a
forward program has no optimizer, so ``opt_shard_group`` is "".
"""

from __future__ import annotations

from typing import Any

from graphpar import _context
from graphpar.compile.plans.parameter_layout import parameter_layout_dict
from graphpar.compile.plans.planned import Planned


def parameter_layouts(planned: Planned) -> dict[str, tuple[Any, ...]]:
    """MindSpore's ``parameter_layout_dict`` of a planned forward graph (see the module docstring)."""
    graph = planned.graph
    if graph is None:
        return {}
    return parameter_layout_dict(graph, graph.plan.mesh.n_devices, _context.current_parallel().parallel_mode,
                                 trainable=set())
