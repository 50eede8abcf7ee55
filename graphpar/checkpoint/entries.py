"""What a checkpoint holds, by name, and how loaded values go back into Cells and optimizers.

Names follow MindSpore: a Parameter is saved under its own name (``fc1.weight``, ``bn1.moving_mean``). Network state
that is not a Parameter (a Dropout's random key) is named by its attribute path with the segments of wrapper Cells
dropped, exactly as MindSpore drops them from Parameter names (``TrainOneStepCell``, ``WithLossCell`` and optimizers
are ``auto_prefix=False``), so a checkpoint of a ``TrainOneStepCell`` loads into the bare network. Optimizer state (the
optax state tree) is saved under ``optimizer.<path>``, e.g. ``optimizer.0.trace.fc1.weight`` for Momentum's
accumulator of ``fc1.weight`` (MindSpore calls it ``moments.fc1.weight``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell
from graphpar.nn.loss_scale import train_transformation
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.nn.wrap import TrainOneStepCell
from graphpar.planner.state_paths import parameter_of

OPTIMIZER_PREFIX = "optimizer."


@dataclass
class Entry:
    """One named array of a checkpoint. ``group``: ``network``, ``optimizer`` or ``append``."""

    name: str
    group: str
    value: Any
    trainable: bool = False
    slices: list | None = None  # set when ``value`` already holds rows of slices: each row's part of the tensor
    global_shape: tuple | None = None  # the whole tensor's shape, with ``slices``
    pipeline_stage: int | None = None  # the stage whose devices hold it (pipeline parallel), recorded in the manifest


def _key_text(key: Any) -> str:
    if isinstance(key, (jax.tree_util.DictKey, jax.tree_util.FlattenedIndexKey)):
        return str(key.key)
    if isinstance(key, jax.tree_util.GetAttrKey):
        return str(key.name)
    if isinstance(key, jax.tree_util.SequenceKey):
        return str(key.idx)
    return str(key)  # NNX state paths hold plain strings and ints


def tree_path_name(path: Iterable[Any]) -> str:
    """``0.trace.fc1.weight`` for a pytree path (dict keys, attribute names and indices joined by dots)."""
    return ".".join(_key_text(key) for key in path)


def _variable_name(root: Cell, path: tuple, holder: Any) -> str:
    if isinstance(holder, Parameter):
        return holder.name
    parts, obj = [], root
    for segment in path:
        child = obj[segment] if isinstance(obj, (list, tuple, dict)) else getattr(obj, str(segment), None)
        if not (isinstance(obj, Cell) and not obj.__dict__.get("_auto_prefix", True) and isinstance(child, Cell)):
            parts.append(str(segment))
        obj = child
    return ".".join(parts)


def network_variables(cell: Cell) -> list[tuple[str, nnx.Variable]]:
    """``(name, variable)`` for every NNX Variable of ``cell`` (Parameters and other state), each once."""
    out, seen = [], set()
    for path, holder in nnx.to_flat_state(nnx.state(cell)):
        if not isinstance(holder, nnx.Variable) or id(holder) in seen:
            continue
        seen.add(id(holder))
        out.append((_variable_name(cell, tuple(path), holder), holder))
    return out


def optimizer_of(cell: Any) -> Any:
    """The optimizer a Cell trains with (a ``TrainOneStepCell``'s, or one held anywhere in it), else None."""
    if isinstance(cell, Optimizer):
        return cell
    if not isinstance(cell, Cell):
        return None
    if isinstance(cell, TrainOneStepCell) and isinstance(cell.optimizer, Optimizer):
        return cell.optimizer
    for _, sub in cell.cells_and_names():
        if isinstance(sub, Optimizer):
            return sub
    return None


def optimizer_entries(optimizer: Any) -> list[Entry]:
    state = optimizer.opt_state if optimizer is not None else None
    if state is None:
        return []
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    # a leaf of a pipelined Parameter's state lives where the Parameter's (first) stage does
    stages = {p.name: p.get_metadata().get("pipeline_stage") for p in optimizer.parameters}
    return [Entry(tree_path_name(path), "optimizer", leaf,
                  pipeline_stage=stages.get(parameter_of(path, stages) or "")) for path, leaf in leaves]


def cell_entries(cell: Cell) -> list[Entry]:
    """Every variable of ``cell`` plus its optimizer's state (when the optimizer has run)."""
    entries = []
    for name, holder in network_variables(cell):
        trainable = isinstance(holder, Parameter) and holder.requires_grad
        stage = holder.get_metadata().get("pipeline_stage")  # set when a pipelined step placed it
        entries.append(Entry(name, "network", holder.get_raw_value(), trainable, pipeline_stage=stage))
    opt = optimizer_of(cell)
    if opt is not None and not isinstance(cell, Optimizer):
        entries += optimizer_entries(opt)
    return entries


def _named_value(item: Any, where: str) -> tuple[str, Any]:
    if isinstance(item, Parameter):
        return item.name, item.get_raw_value()
    if isinstance(item, dict) and set(item) >= {"name", "data"}:
        data = item["data"]
        return str(item["name"]), data.get_raw_value() if isinstance(data, Parameter) else data
    raise TypeError(f"save_checkpoint(save_obj): {where} must be a Parameter or a dict {{'name': str, 'data': "
                    f"Tensor}}, got {type(item).__name__}")


def collect(save_obj: Any, choice_func: Callable[[str], bool] | None = None) -> list[Entry]:
    """The entries of ``save_obj``: a Cell, a list of Parameters or ``{"name", "data"}`` dicts, or a dict of
    ``{name: Tensor or Parameter}`` (MindSpore's three forms)."""
    if isinstance(save_obj, Cell):
        entries = cell_entries(save_obj)
    elif isinstance(save_obj, (list, tuple)):
        entries = [Entry(name, "network", value)
                   for name, value in (_named_value(item, f"item {i}") for i, item in enumerate(save_obj))]
    elif isinstance(save_obj, dict):
        entries = [Entry(str(k), "network", v.get_raw_value() if isinstance(v, Parameter) else v)
                   for k, v in save_obj.items()]
    else:
        raise TypeError(f"save_checkpoint(save_obj): expected a Cell, a list or a dict, got "
                        f"{type(save_obj).__name__}")
    for entry in entries:
        if entry.group == "network" and not isinstance(entry.value, (jax.Array, np.ndarray)):
            entry.value = np.asarray(entry.value)
    if choice_func is not None:
        entries = [e for e in entries if choice_func(e.name if e.group == "network" else OPTIMIZER_PREFIX + e.name)]
    names = [e.name for e in entries if e.group == "network"]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"save_checkpoint: the names {dup} are used by more than one array; every saved array "
                         "needs a unique name (give Parameters unique names)")
    return entries


def check_shape(name: str, have: tuple, want: tuple, what: str) -> None:
    if tuple(have) != tuple(want):
        raise ValueError(f"{what}: '{name}' has shape {tuple(want)} in the network but {tuple(have)} in the "
                         "checkpoint; the checkpoint was saved from a different network (or batch size)")


def assign(holder: nnx.Variable, name: str, value: Any, strict_load: bool, what: str) -> None:
    """Set a variable from a checkpoint value: same shape; dtype converted within floats or within ints unless
    ``strict_load`` (MindSpore's rule), otherwise an error naming both dtypes."""
    old = holder.get_raw_value()
    check_shape(name, np.shape(value), np.shape(old), what)
    old_dtype, new_dtype = np.dtype(old.dtype), np.dtype(value.dtype)
    if old_dtype != new_dtype:
        same_kind = {old_dtype.kind, new_dtype.kind} <= set("f") or {old_dtype.kind, new_dtype.kind} <= set("iu")
        if strict_load or not same_kind:
            raise TypeError(f"{what}: '{name}' is {old_dtype} in the network but {new_dtype} in the checkpoint"
                            + ("" if same_kind else "; only float-to-float and int-to-int loads convert")
                            + (" (strict_load=True converts nothing)" if strict_load and same_kind else ""))
        value = np.asarray(value).astype(old_dtype)
    holder.set_raw_value(value if isinstance(value, jax.Array) else jnp.asarray(value))


def load_optimizer(optimizer: Any, values: dict[str, Any], where: str, cell: Any = None) -> list[str]:
    """Set the optimizer's state from ``{path name: array}``; returns the names used. The state's structure comes
    from the optimizer's state if it has run, else from the transformation the train step of ``cell`` (the Cell
    being loaded) applies with it, initialized from its Parameters: with loss scaling (``amp_level="O2"``, a
    ``loss_scale_manager``) that state wraps the optimizer's own with the scale and its counters."""
    if optimizer.opt_state is None:
        params = {p.name: p.get_raw_value() for p in optimizer.parameters}
        optimizer.opt_state = train_transformation(cell, optimizer).init(params)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(optimizer.opt_state)
    names = [tree_path_name(path) for path, _ in leaves]
    missing = [n for n in names if n not in values]
    if missing:
        raise ValueError(f"{where}: the checkpoint has no optimizer state for {missing[:4]}"
                         f"{' ...' if len(missing) > 4 else ''} ({len(missing)} of {len(names)} entries); it was "
                         f"saved with a different optimizer or set of trainable Parameters")
    new = []
    for (path, leaf), name in zip(leaves, names):
        value = values[name]
        check_shape(OPTIMIZER_PREFIX + name, np.shape(value), np.shape(leaf), where)
        new.append(value if isinstance(value, jax.Array) else jnp.asarray(value))
    optimizer.opt_state = jax.tree_util.tree_unflatten(treedef, new)
    return names
