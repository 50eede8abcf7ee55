"""Strategy files: the plan of a network written as JSON, and read back to force the same plan.

``set_auto_parallel_context(strategy_ckpt_config={"save_file": ..., "load_file": ..., "only_trainable_params":
...})`` (or the older ``strategy_ckpt_save_file`` / ``strategy_ckpt_load_file``). The file is MindSpore's JSON
strategy checkpoint, which MindSpore itself reads and writes, plus a ``graphpar`` section::

    {"current_stage": 0,
     "parallel_strategy_item": {"<scope>/<Kind>-<instance>": {"stage": 0, "parallel_strategy": [[2, 4], [4, 1]]}},
     "parallel_layout_item": {"<parameter>": {"dev_matrix": [2, 4], "tensor_map": [0, -1], "tensor_shape": [32, 16],
                                              "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}},
     "graphpar": {"version": 1, "parallel_mode": ..., "device_num": 8,
                  "mesh": {"axis_names": ["m0", "m1", "m2"], "axis_sizes": [2, 2, 2]},
                  "layouts": {"<parameter>": {"mesh_spec": [["m1", "m2"], []], "trainable": true}},
                  "strategies": {"<key>": {"kind": "MatMul", "instance_name": "matmul", "scope": "...",
                                           "in_strategy": [[2, 4], [4, 1]], "out_strategy": null,
                                           "provenance": "user"}}}}

An op given ``Layout`` objects also records them (``"in_layout"`` / ``"out_layout"``: per tensor, MindSpore's
``dev_matrix`` and ``tensor_map`` with the layout's ``alias_name``), so loading places it on the same device-matrix
axes, not only with the same number of pieces per dimension.

An op's key is its Cell scope, kind and instance name; the k-th repeat of a key in graph order gets ``#k``. A file
MindSpore wrote names ops ``{Kind}_{first Parameter input}`` (:func:`mindspore_keys`); loading finds them by either. Loading
(the ``apply_strategy_file`` pass) gives every op found in the file its recorded strategy, then propagation and the
defaults fill in the rest, so the same network on the same devices gets exactly the same plan.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar._logging import notice_once
from graphpar.errors import ConfigError
from graphpar.ir.graph import Graph
from graphpar.planner.layout import Layout, from_tensor_map, is_layout_strategy
from graphpar.planner.mesh import axis_names, mesh_axis_sizes
from graphpar.planner.optimizer_parallel import OptimizerParallelConfig, shard_parameter, shard_step
from graphpar.planner.tensor_layout import from_mesh_spec, rank_slices

VERSION = 1


@dataclass(frozen=True)
class ParameterLayout:
    """How one parameter is split: MindSpore's ``dev_matrix``/``tensor_map`` and graphpar's mesh-axis spec."""

    dev_matrix: list[int]
    tensor_map: list[Any]
    tensor_shape: list[int]
    mesh_spec: list[list[str]] | None = None
    field: int = 0
    opt_weight_shard_step: int = 0
    opt_weight_shard_size: int = 0
    optimizer_spec: list[list[str]] | None = None  # storage layout under the parallel optimizer (mesh axes)

    def rank_slices(self, shape: Any = None) -> list:
        """The slice of the parameter each rank holds (ranks fill ``dev_matrix`` row-major)."""
        return rank_slices(self.dev_matrix, self.tensor_map, shape if shape is not None else self.tensor_shape)


@dataclass(frozen=True)
class RecordedStrategy:
    key: str
    kind: str
    instance_name: str
    scope: str
    in_strategy: tuple
    out_strategy: tuple | None
    in_layout: tuple[Layout, ...] | None = None  # the op's shard() layouts, when it was given Layout objects
    out_layout: tuple[Layout, ...] | None = None


@dataclass(frozen=True)
class StrategyFile:
    """Op strategies (and parameter layouts) to force on a plan: a loaded strategy file, or the plan of a
    dynamic-shape signature forced on each concrete shape (``compile.plans.dynamic``); ``source`` and ``fit_hint``
    say which in the errors of a strategy that does not fit."""

    path: str
    device_num: int | None
    strategies: dict[str, RecordedStrategy] = field(default_factory=dict)
    layouts: dict[str, ParameterLayout] = field(default_factory=dict)
    source: str = "strategy file"
    fit_hint: str = ("Plan with the network and device count the file was written for, or drop "
                     "strategy_ckpt_config['load_file']")


def node_keys(graph: Graph) -> dict[int, str]:
    """A stable name for every op node: ``{scope}/{Kind}-{instance}``, ``#k`` on the k-th repeat."""
    seen: dict[str, int] = {}
    out = {}
    for node in graph.node_list():
        base = f"{node.scope}/{node.kind}-{node.instance_name}" if node.scope else f"{node.kind}-{node.instance_name}"
        count = seen.get(base, 0)
        seen[base] = count + 1
        out[node.id] = base if count == 0 else f"{base}#{count}"
    return out


def mindspore_keys(graph: Graph) -> dict[int, str]:
    """The key MindSpore's strategy files give an op: ``{Kind}_{name of its first Parameter input}``
    (``MatMul_fc1.weight``; its ``StrategyCheckpoint`` keys ``prim->name() + "_" + param name``). Ops reading no
    Parameter have none, as in MindSpore; a key already taken by an earlier op stays with it."""
    out: dict[int, str] = {}
    taken: set[str] = set()
    for node in graph.node_list():
        if not node.is_op:
            continue
        params = [graph.values[v].name for v in node.inputs if graph.values[v].kind == "param"]
        if params and f"{node.kind}_{params[0]}" not in taken:
            out[node.id] = f"{node.kind}_{params[0]}"
            taken.add(out[node.id])
    return out


def layout_json(layout: Layout) -> dict[str, Any]:
    """A layout as a strategy file records it: MindSpore's ``dev_matrix`` and ``tensor_map`` (device-matrix axes
    counted from the right, -1 unsplit, a list for a dimension split over several axes), with its alias names."""
    return {"dev_matrix": list(layout.device_matrix), "alias_name": list(layout.alias_name),
            "tensor_map": [list(e) if isinstance(e, tuple) else e for e in layout.tensor_map]}


def _layouts(items: Any) -> tuple[Layout, ...] | None:
    return None if items is None else tuple(from_tensor_map(i["dev_matrix"], i["alias_name"], i["tensor_map"])
                                            for i in items)


def _tuples(value: Any) -> tuple | None:
    return None if value is None else tuple(tuple(int(d) for d in row) for row in value)


def _optimizer_shard(value: Any, spec: list | None, mesh: Any, device_num: int, replicated: bool,
                     optimizer: Any) -> Any:
    """The parallel optimizer's sharding of a parameter (``parallel.optimizer_parallel``), on the plan's mesh."""
    if replicated:  # DATA_PARALLEL: the parameter is whole on every device of the job's mesh
        sizes = mesh_axis_sizes(device_num)
        names, compute = axis_names(len(sizes)), tuple(() for _ in value.shape)
    else:
        names, sizes = mesh.names, mesh.sizes
        compute = tuple(tuple(a) for a in spec) if spec is not None else tuple(() for _ in value.shape)
    return shard_parameter(value.name, value.shape, value.itemsize, compute, names, sizes, optimizer), names, sizes


def from_graph(graph: Graph, device_num: int, parallel_mode: str, trainable: set[str],
               only_trainable_params: bool, replicated: bool = False, optimizer: Any = None) -> dict[str, Any]:
    """The JSON object of a planned graph. ``replicated``: every parameter whole on every device (DATA_PARALLEL).
    ``optimizer`` (an ``OptimizerParallelConfig``): record each trainable parameter's parallel-optimizer sharding
    (MindSpore's ``opt_weight_shard_size``/``opt_weight_shard_step``, graphpar's ``optimizer_spec``)."""
    mesh = graph.plan.mesh
    specs = graph.plan.value_specs
    layouts, ms_layouts, strategies, ms_strategies = {}, {}, {}, {}
    for vid in graph.inputs:
        value = graph.values[vid]
        if value.kind != "param" or (only_trainable_params and value.name not in trainable):
            continue
        if replicated or vid not in specs:
            dev_matrix, tensor_map, spec = [device_num], [-1] * len(value.shape), None
        else:
            spec = [list(axes) for axes in specs[vid]]
            dev_matrix, tensor_map = from_mesh_spec(spec, mesh.names, mesh.sizes)
        step = size = 0
        layouts[value.name] = {"mesh_spec": spec, "trainable": value.name in trainable}
        if optimizer is not None and optimizer.enabled and value.name in trainable and device_num > 1:
            shard, names, sizes = _optimizer_shard(value, spec, mesh, device_num, replicated, optimizer)
            if shard.sharded:
                step, size = shard_step(shard, names, sizes), shard.group_size
                layouts[value.name]["optimizer_spec"] = [list(axes) for axes in shard.storage_spec]
            else:
                layouts[value.name]["optimizer_note"] = shard.reason
        ms_layouts[value.name] = {"dev_matrix": dev_matrix, "tensor_map": tensor_map,
                                  "tensor_shape": list(value.shape), "field": 0, "opt_weight_shard_step": step,
                                  "opt_weight_shard_size": size}
    if not replicated:
        for node_id, key in node_keys(graph).items():
            node = graph.nodes[node_id]
            if node.strategy is None or not node.is_op:
                continue
            out = node.strategy.out_override
            out_strategy = None
            if out is not None:
                out_strategy = [[mesh.size(axes) for axes in spec] for spec in out]
            in_strategy = [list(row) for row in node.strategy.in_strategy()]
            ms_strategies[key] = {"stage": 0, "parallel_strategy": in_strategy}
            strategies[key] = {"kind": node.kind, "instance_name": node.instance_name, "scope": node.scope,
                               "in_strategy": in_strategy, "out_strategy": out_strategy,
                               "provenance": node.provenance.kind if node.provenance else None}
            if is_layout_strategy(node.hint) and node.provenance is not None and node.provenance.kind == "user":
                strategies[key]["in_layout"] = [layout_json(layout) for layout in node.hint]
                strategies[key]["out_layout"] = (None if node.out_hint is None else
                                                 [layout_json(layout) for layout in node.out_hint])
    return {"current_stage": 0, "parallel_strategy_item": ms_strategies, "parallel_layout_item": ms_layouts,
            "graphpar": {"version": VERSION, "parallel_mode": parallel_mode, "device_num": device_num,
                         "mesh": None if replicated else {"axis_names": list(mesh.names),
                                                          "axis_sizes": list(mesh.sizes)},
                         "layouts": layouts, "strategies": strategies}}


def _text(data: Any, depth: int = 0) -> str:
    """Indented JSON with lists of numbers and strings (strategy rows, shapes, specs) kept on one line."""
    def flat(value: Any) -> bool:
        return not isinstance(value, (dict, list)) or (isinstance(value, list) and all(flat(v) for v in value))

    if isinstance(data, dict) and data:
        pad = " " * (depth + 1)
        items = [f"{pad}{json.dumps(k)}: {_text(v, depth + 1)}" for k, v in data.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if isinstance(data, list) and not flat(data):
        pad = " " * (depth + 1)
        return "[\n" + ",\n".join(pad + _text(v, depth + 1) for v in data) + "\n" + " " * depth + "]"
    return json.dumps(data)


def _unwritable(path: str, reason: str) -> ConfigError:
    return ConfigError("set_auto_parallel_context", "strategy_ckpt_config", {"save_file": path},
                       reason=f"strategy file {path}: {reason}")


def write(path: str, data: dict[str, Any]) -> None:
    """Write the strategy file ``path``: owner-only (0600, as MindSpore's ``StrategyCheckpoint::Save`` leaves it;
    a directory it creates is 0700) and atomically (a private temporary file in the same directory, renamed over
    ``path``). A ``path`` that cannot be written (a directory, a read-only folder) is a :class:`ConfigError` naming
    it, and no temporary file is left behind."""
    if os.path.isdir(path):
        raise _unwritable(path, "save_file is a directory; give the path of a file in it, such as "
                                f"{os.path.join(path, 'strategy.json')}")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)  # 0600
    except OSError as exc:
        raise _unwritable(path, f"cannot write into {folder}: {exc.strerror or exc}; give a writable save_file "
                                "path") from None
    try:
        with os.fdopen(handle, "w") as fh:
            fh.write(_text(data))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _unwritable(path, f"cannot be written: {exc.strerror or exc}; give a writable save_file path") from None


def _bad(path: str, reason: str) -> ConfigError:
    return ConfigError("set_auto_parallel_context", "strategy_ckpt_config", {"load_file": path},
                       reason=f"strategy file {path}: {reason}")


def read(path: str) -> StrategyFile:
    """Parse a strategy file (graphpar's, or MindSpore's JSON form: layouts only)."""
    if not os.path.isfile(path):
        raise _bad(path, "no such file")
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise _bad(path, f"not a JSON strategy file ({exc}); graphpar reads the JSON form MindSpore writes "
                         "for a .json save_file, not its protobuf form") from exc
    if not isinstance(data, dict) or "parallel_layout_item" not in data:
        raise _bad(path, "it has no 'parallel_layout_item' (not a strategy file)")
    try:
        return _parse(path, data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field of the wrong kind or missing
        what = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise _bad(path, f"malformed strategy file ({what}); graphpar reads the JSON form MindSpore writes, with "
                         "parallel_layout_item entries holding dev_matrix and tensor_map lists") from None


def _parse(path: str, data: dict) -> StrategyFile:
    """The strategy file of parsed JSON ``data`` (raises KeyError/TypeError/... on a malformed one)."""
    extra = data.get("graphpar") or {}
    layouts = {}
    for name, item in data["parallel_layout_item"].items():
        ours = extra.get("layouts", {}).get(name) or {}
        layouts[name] = ParameterLayout(list(item["dev_matrix"]), list(item["tensor_map"]),
                                        list(item.get("tensor_shape", [])), ours.get("mesh_spec"),
                                        int(item.get("field", 0)), int(item.get("opt_weight_shard_step", 0)),
                                        int(item.get("opt_weight_shard_size", 0)), ours.get("optimizer_spec"))
    strategies = {}
    for key, item in (extra.get("strategies") or {}).items():
        strategies[key] = RecordedStrategy(key, item["kind"], item["instance_name"], item.get("scope", ""),
                                           _tuples(item["in_strategy"]), _tuples(item.get("out_strategy")),
                                           _layouts(item.get("in_layout")), _layouts(item.get("out_layout")))
    if not extra:  # MindSpore's own file: op strategies by node name, without graphpar's keys
        for key, item in data.get("parallel_strategy_item", {}).items():
            strategies[key] = RecordedStrategy(key, "", "", "", _tuples(item["parallel_strategy"]), None)
    return StrategyFile(path, extra.get("device_num"), strategies, layouts)


def _op_config(pctx: Any, mode: str) -> str:
    """The path of ``set_op_strategy_config(mode, path)`` when it applies to this plan (AUTO_PARALLEL with sharding
    propagation, as MindSpore), else ""; set under another mode, that is said once."""
    config = _context.current_op_strategy_config()
    if not config.path or config.mode != mode:
        return ""
    if pctx.parallel_mode != ParallelMode.AUTO_PARALLEL or pctx.search_mode != "sharding_propagation":
        notice_once(f"op-strategy-config:{config.mode}", f"set_op_strategy_config(mode={config.mode!r}) applies "
                    f"to AUTO_PARALLEL with search_mode='sharding_propagation' only; with parallel_mode="
                    f"{pctx.parallel_mode!r}, search_mode={pctx.search_mode!r} no op strategy is saved or loaded")
        return ""
    return config.path


def maybe_save(graph: Graph, pctx: Any, device_num: int, trainable: set[str], replicated: bool = False,
               parameters: Sequence[Any] = ()) -> None:
    """Write the plan to the configured ``save_file`` (process 0; train graphs, or the first graph planned), and
    to ``set_op_strategy_config(mode="SAVE", path)``'s file (the same format). ``parameters``: the trainable
    ``Parameter``s (their ``parallel_optimizer`` flags)."""
    config = pctx.strategy_ckpt_config or {}
    for path in (config.get("save_file"), _op_config(pctx, "SAVE")):
        if path:
            _save(path, graph, pctx, device_num, trainable, replicated, parameters)


def _save(path: str, graph: Graph, pctx: Any, device_num: int, trainable: set[str], replicated: bool,
          parameters: Sequence[Any]) -> None:
    config = pctx.strategy_ckpt_config or {}
    import jax

    if jax.process_index() != 0 or (graph.plan.purpose != "train" and os.path.isfile(path)):
        return
    write(path, from_graph(graph, device_num, pctx.parallel_mode, trainable,
                           bool(config.get("only_trainable_params", True)), replicated,
                           OptimizerParallelConfig.from_context(pctx, parameters)))


@dataclass(frozen=True)
class FileMatch:
    """How a loaded strategy file's entries meet a traced graph: its op entries (``parallel_strategy_item`` /
    graphpar's ``strategies``) against the graph's node keys, its parameter entries (``parallel_layout_item``)
    against the graph's parameter names."""

    entries: int  # op and parameter entries in the file
    matched: int
    unmatched_ops: tuple[str, ...]
    unmatched_params: tuple[str, ...]
    graph_ops: tuple[str, ...]  # the graph's own op keys and parameter names, for the message
    graph_params: tuple[str, ...]

    params: int  # parameter entries in the file

    @property
    def unmatched(self) -> tuple[str, ...]:
        return self.unmatched_ops + self.unmatched_params

    @property
    def foreign(self) -> bool:
        """Written for another network: no entry matches, or the file records parameters and none of them is one
        of this network's (op keys alone can match by a shared scaffolding: the same loss Cell)."""
        return self.entries > 0 and (self.matched == 0 or
                                     (self.params > 0 and len(self.unmatched_params) == self.params))


def match(record: StrategyFile, graph: Graph) -> FileMatch:
    """Which of ``record``'s entries name an op or a parameter of ``graph``."""
    op_keys = [key for node_id, key in node_keys(graph).items() if graph.nodes[node_id].is_op]
    op_keys += list(mindspore_keys(graph).values())
    params = [graph.values[v].name for v in graph.inputs if graph.values[v].kind == "param"]
    have_ops, have_params = set(op_keys), set(params)
    unmatched_ops = tuple(k for k in record.strategies if k not in have_ops)
    unmatched_params = tuple(n for n in record.layouts if n not in have_params)
    entries = len(record.strategies) + len(record.layouts)
    return FileMatch(entries, entries - len(unmatched_ops) - len(unmatched_params), unmatched_ops, unmatched_params,
                     tuple(op_keys), tuple(params), len(record.layouts))


def for_plan(pctx: Any) -> StrategyFile | None:
    """The strategy file to force: ``strategy_ckpt_config``'s ``load_file``, or ``set_op_strategy_config(mode=
    "LOAD", path)``'s file (both at once is refused: which to force would be a guess)."""
    path = (pctx.strategy_ckpt_config or {}).get("load_file")
    op_path = _op_config(pctx, "LOAD")
    if path and op_path:
        raise ConfigError("set_op_strategy_config", "path", op_path, reason=f"mode='LOAD' from {op_path!r} while "
                          f"strategy_ckpt_config loads {path!r}: load one of them")
    path = path or op_path
    return read(path) if path else None
