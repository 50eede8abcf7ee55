"""MindSpore's ``parameter_layout_dict`` of a planned graph: how each Parameter is laid out on the devices.

MindSpore fills ``net.parameter_layout_dict`` when it compiles a network in SEMI_AUTO / AUTO, and its tools and
tests read it (``Model.infer_predict_layout`` returns the predict network's, ``load_distributed_checkpoint`` loads
into it, its unit tests' ``ParallelValidator.check_parameter_shape`` compare each Parameter's slice). Per
Parameter name, the tuple ``(device_arrangement, tensor_map, slice_shape, field_size, uniform_split,
opt_shard_group)`` (the first six of the twelve fields of MindSpore's tuple; a test slices ``[0:6]``):

* ``device_arrangement`` / ``tensor_map``: MindSpore's device matrix and tensor map of the Parameter's layout on
  the plan's mesh (``planner.tensor_layout.from_mesh_spec``; tensor maps count device-matrix dimensions from the
  right, -1 is "not split"; a dimension split by several, as a ``Layout`` writes ``("sp", "mp")``, lists them in
  place, flattened as MindSpore prints them). graphpar's mesh is made of prime-factor axes, so the device matrix
  merges neighbouring axes that split the same dimension: a 16-device ``Layout((2, 2, 2, 2), ...)`` whose
  Parameter uses three of its axes may read ``[4, 2, 2]`` here. The slice is the same.
* ``slice_shape``: the block each device holds for compute (before the parallel optimizer's sharding, as
  MindSpore's).
* ``field_size`` 0, ``uniform_split`` True (XLA splits evenly).
* ``opt_shard_group``: "" unless the parallel optimizer shards the Parameter; then graphpar names the group by its
  size and rank 0's members (``"2-0_8"``). MindSpore names it by its size and a hash of the ranks
  (``"2-16557109384257890687"``), which is not reproduced.

The values come from the same record the strategy file is written from (``planner.strategy_file.from_graph``), so
the two never disagree. Outside SEMI_AUTO / AUTO nothing is planned and the dictionary is empty, as MindSpore's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphpar.ir.graph import Graph
from graphpar.planner import strategy_file
from graphpar.planner.optimizer_parallel import OptimizerParallelConfig
from graphpar.planner.tensor_layout import from_mesh_spec


def _flat(entry: Any) -> list[int]:
    return [int(e) for e in entry] if isinstance(entry, (list, tuple)) else [int(entry)]


def _slice_shape(shape: list[int], dev_matrix: list[int], tensor_map: list[Any]) -> list[int]:
    out = []
    for size, entry in zip(shape, tensor_map):
        split = 1
        for e in _flat(entry):
            if e != -1:
                split *= dev_matrix[len(dev_matrix) - 1 - e]
        out.append(size // split)
    return out


def parameter_layout_dict(graph: Graph, device_num: int, parallel_mode: str, trainable: set[str],
                          optimizer: OptimizerParallelConfig | None = None,
                          input_names: Mapping[int, str] | None = None) -> dict[str, tuple[Any, ...]]:
    """``{Parameter name: [device_arrangement, tensor_map, slice_shape, field_size, uniform_split,
    opt_shard_group]}`` of a planned graph (see the module docstring). ``optimizer``: the parallel optimizer's
    settings when the graph is a train step (its sharding names ``opt_shard_group``). ``input_names`` (graph-input
    value id -> the graph parameter's name, MindSpore's ``construct`` argument name): the data inputs are graph
    parameters too in MindSpore's compiled graph, so its dictionary holds each one's dataset layout (``x``: split
    by the ranks stacking their rows, whole with ``full_batch``)."""
    record = strategy_file.from_graph(graph, device_num, parallel_mode, trainable, only_trainable_params=False,
                                      optimizer=optimizer)
    out: dict[str, tuple[Any, ...]] = {}
    for name, item in record["parallel_layout_item"].items():
        dev_matrix = [int(d) for d in item["dev_matrix"]]
        tensor_map = item["tensor_map"]
        size, step = item["opt_weight_shard_size"], item["opt_weight_shard_step"]
        group = f"{size}-" + "_".join(str(i * step) for i in range(size)) if size else ""
        out[name] = (dev_matrix, [e for entry in tensor_map for e in _flat(entry)],
                     _slice_shape(item["tensor_shape"], dev_matrix, tensor_map), 0, True, group)
    mesh = graph.plan.mesh
    for vid, name in (input_names or {}).items():
        value = graph.values[vid]
        if name in out or mesh is None:
            continue
        spec = graph.plan.input_specs.get(vid, tuple(() for _ in value.shape))
        dev_matrix, tensor_map = from_mesh_spec([list(axes) for axes in spec], mesh.names, mesh.sizes)
        out[name] = (dev_matrix, [e for entry in tensor_map for e in _flat(entry)],
                     _slice_shape(list(value.shape), dev_matrix, tensor_map), 0, True, "")
    return out
