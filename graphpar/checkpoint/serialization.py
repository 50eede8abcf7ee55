"""MindSpore's ``save_checkpoint``, ``load_checkpoint`` and ``load_param_into_net``.

A graphpar checkpoint is a *directory* named like MindSpore's file (``CKP-1_4.ckpt``): orbax writes each array's
shards from the processes that hold them, and a manifest (``graphpar.json``) written last makes it complete and
verifiable. ``load_checkpoint`` returns ``{name: Parameter}`` of whole tensors, whatever layout and device count the
checkpoint was saved with (sliced checkpoints are merged from their rows), so it loads onto any plan.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from graphpar._logging import notice_once
from graphpar.checkpoint import rank_views, store
from graphpar.checkpoint.directory import latest_checkpoint
from graphpar.checkpoint.entries import (
    OPTIMIZER_PREFIX, Entry, assign, collect, load_optimizer, network_variables, optimizer_of)
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.manifest import MANIFEST
from graphpar.checkpoint.slices import merge_rows
from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell

SUFFIX = ".ckpt"


def _refuse(api: str, enc_key: Any, fmt: str) -> None:
    if enc_key is not None:
        raise ValueError(f"{api}(enc_key=...): encrypted checkpoints are not supported by graphpar; encrypt the "
                         "checkpoint directory with your storage's encryption instead")
    if fmt != "ckpt":
        raise ValueError(f"{api}(format={fmt!r}): graphpar writes one format (an orbax checkpoint directory with a "
                         "manifest); valid: 'ckpt'")


def checkpoint_path(ckpt_file_name: str, must_exist: bool = False) -> str:
    """MindSpore's naming: ``.ckpt`` is appended when missing (for loading, only if the plain name is absent)."""
    if not isinstance(ckpt_file_name, (str, os.PathLike)):
        raise TypeError(f"the checkpoint name must be a str, got {type(ckpt_file_name).__name__}")
    path = os.fspath(ckpt_file_name)
    if path.endswith(SUFFIX) or (must_exist and os.path.exists(path)):
        return path
    return path + SUFFIX


def _append_entries(append_dict: dict | None) -> tuple[list[Entry], dict[str, Any]]:
    entries, scalars = [], {}
    for key, value in (append_dict or {}).items():
        if not isinstance(key, str):
            raise TypeError(f"save_checkpoint(append_dict): keys must be str, got {key!r}")
        if isinstance(value, (bool, int, float, str)):
            scalars[key] = value
        elif isinstance(value, (Parameter, jax.Array, np.ndarray)):
            raw = value.get_raw_value() if isinstance(value, Parameter) else value
            entries.append(Entry(key, "append", raw if isinstance(raw, jax.Array) else np.asarray(raw)))
        else:
            raise TypeError(f"save_checkpoint(append_dict): '{key}' is a {type(value).__name__}; valid values: int, "
                            "float, bool, str, Parameter or Tensor")
    return entries, scalars


def save_state(save_obj: Any, path: str, *, integrated_save: bool = True, async_save: bool = False,
               append_dict: dict | None = None, choice_func: Callable[[str], bool] | None = None,
               extra: dict | None = None, on_commit: Callable[[], None] | None = None,
               agree: bool = True) -> store.PendingSave:
    """``save_checkpoint`` with the extras ``ModelCheckpoint`` adds (training progress, a commit hook; its
    directory is agreed on once, so ``agree=False``)."""
    entries = collect(save_obj, choice_func)
    appended, scalars = _append_entries(append_dict)
    if agree:
        path = store.agree_on_path(path, "save_checkpoint")

    def committed() -> None:  # process 0, once the checkpoint is complete: the other ranks' folders name it too
        rank_views.write_views(path)
        if on_commit is not None:
            on_commit()

    return store.write(path, entries + appended, integrated=integrated_save, async_save=async_save,
                       extra={"append": scalars, **(extra or {})}, on_commit=committed)


def save_checkpoint(save_obj: Any, ckpt_file_name: str, integrated_save: bool = True, async_save: bool = False,
                    append_dict: dict | None = None, enc_key: Any = None, enc_mode: str = "AES-GCM",
                    choice_func: Callable[[str], bool] | None = None, crc_check: bool = False,
                    format: str = "ckpt", **kwargs: Any) -> None:
    """Save a Cell's Parameters and state (and, for a ``TrainOneStepCell``, its optimizer state), or a list of
    Parameters / ``{"name", "data"}`` dicts, as the checkpoint directory ``ckpt_file_name`` (``.ckpt`` appended).

    Every process of a job calls it; each writes the shards it holds. ``integrated_save=True`` stores whole tensors;
    ``False`` stores each rank's slice (see docs/checkpoints.md). ``async_save`` returns once the values are copied
    to the host. graphpar always records checksums (``crc_check`` is accepted and implied).
    """
    _refuse("save_checkpoint", enc_key, format)
    save_state(save_obj, checkpoint_path(ckpt_file_name), integrated_save=bool(integrated_save),
               async_save=bool(async_save), append_dict=append_dict, choice_func=choice_func)


def read_manifest(path: str) -> tuple[str, dict, int | None]:
    """``(checkpoint, manifest, rank)`` of ``path``, verified: a per-rank view (:mod:`rank_views`) reads the
    checkpoint it names, for its ``rank``; a checkpoint reads itself, for every rank (``None``)."""
    body = store.read_manifest(path)
    target, rank = rank_views.resolve(path, body)
    return (target, store.read_manifest(target), rank) if rank is not None else (path, body, None)


def whole_arrays(path: str, body: dict, groups: Sequence[str],
                 rank: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """``{group: {name: numpy array}}``: whole tensors, merged from the rows of a sliced checkpoint; a row alone
    when one rank's checkpoint (or ``rank``'s view of a checkpoint) holds only its slice."""
    arrays = store.read_arrays(path, body, groups)
    body, arrays = rank_views.select_rows(path, body, arrays, None if rank is None else {rank})
    if body.get("layout") != "sliced":
        return arrays
    out: dict[str, dict[str, np.ndarray]] = {g: {} for g in groups}
    for record in body["entries"]:
        if record["group"] not in groups:
            continue
        stacked = arrays[record["group"]][record["name"]]
        rows = list(zip(record["slices"], stacked))
        whole = merge_rows(record["name"], record["shape"], stacked.dtype, rows)
        if whole is None:
            if len(rows) != 1:
                raise CheckpointError(path, f"the slices of '{record['name']}' do not cover its shape "
                                      f"{tuple(record['shape'])}", "Load the checkpoints of all ranks together with "
                                      "load_distributed_checkpoint")
            whole = rows[0][1]
        out[record["group"]][record["name"]] = whole
    return out


def _newest_if_folder(path: str) -> str:
    """A folder of checkpoints (seed 003 loads its ModelCheckpoint ``directory``): its newest complete one."""
    if os.path.isdir(path) and not path.rstrip("/").endswith(SUFFIX) and not os.path.exists(
            os.path.join(path, MANIFEST)):
        newest = latest_checkpoint(path)
        if newest is not None:
            notice_once(f"load-newest:{path}", f"load_checkpoint({path!r}): a directory of checkpoints; loading the "
                        f"newest complete one, {os.path.basename(newest)}")
            return newest
    return path


def _prefix_filter(name: str, specify_prefix: Any, filter_prefix: Any) -> bool:
    def as_tuple(p):
        return (p,) if isinstance(p, str) else tuple(p or ())

    if specify_prefix and not any(name.startswith(p) for p in as_tuple(specify_prefix)):
        return False
    return not any(name.startswith(p) for p in as_tuple(filter_prefix))


def load_checkpoint(ckpt_file_name: str, net: Cell | None = None, strict_load: bool = False,
                    filter_prefix: Any = None, dec_key: Any = None, dec_mode: str = "AES-GCM",
                    specify_prefix: Any = None, choice_func: Callable[[str], bool] | None = None,
                    crc_check: bool = False, remove_redundancy: bool = False,
                    format: str = "ckpt") -> "OrderedDict[str, Parameter]":
    """``{name: Parameter}`` of whole tensors from checkpoint ``ckpt_file_name`` (loaded into ``net`` when given).

    Optimizer state appears as ``optimizer.<path>`` entries and ``append_dict`` values under their keys. Every file is
    verified against the manifest first (``crc_check`` is implied): a truncated, corrupted or incomplete checkpoint
    raises :class:`CheckpointError` naming the file.
    """
    _refuse("load_checkpoint", dec_key, format)
    path = _newest_if_folder(checkpoint_path(ckpt_file_name, must_exist=True))
    path, body, rank = read_manifest(path)
    arrays = whole_arrays(path, body, ("network", "optimizer", "append"), rank)
    result: "OrderedDict[str, Any]" = OrderedDict()
    for record in body["entries"]:
        group, name = record["group"], record["name"]
        key = OPTIMIZER_PREFIX + name if group == "optimizer" else name
        result[key] = Parameter(arrays[group][name], name=key,
                                requires_grad=bool(record.get("trainable", group == "network")))
    for key, value in body.get("append", {}).items():
        result[key] = value if isinstance(value, str) else Parameter(np.asarray(value), name=key,
                                                                     requires_grad=False)
    selected = OrderedDict((k, v) for k, v in result.items() if _prefix_filter(k, specify_prefix, filter_prefix)
                           and (choice_func is None or choice_func(k)))
    if not selected:
        raise ValueError(f"load_checkpoint({path!r}): no entry is left after filter_prefix={filter_prefix!r}, "
                         f"specify_prefix={specify_prefix!r}, choice_func; the checkpoint has {list(result)[:6]}")
    if net is not None:
        load_param_into_net(net, selected, strict_load)
    return selected


def _raw(key: str, value: Any) -> Any:
    if isinstance(value, Parameter):
        return value.get_raw_value()
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return value
    raise TypeError(f"load_param_into_net(parameter_dict): the value of '{key}' must be a Parameter or Tensor, got "
                    f"{type(value).__name__}")


def load_param_into_net(net: Cell, parameter_dict: dict, strict_load: bool = False,
                        remove_redundancy: bool = False) -> tuple[list[str], list[str]]:
    """Load ``parameter_dict`` into ``net``'s Parameters (and state, and its optimizer's state when the dict holds
    ``optimizer.*`` entries). Returns ``(param_not_load, ckpt_not_load)`` as MindSpore 2.x: the net's Parameters
    that got no value, and the dict's names that were not used.

    Without ``strict_load`` a name that differs only by a prefix still loads (``backbone.fc.weight`` into
    ``fc.weight``), and float/int dtypes convert; shapes must always match.
    """
    if not isinstance(net, Cell):
        raise TypeError(f"load_param_into_net(net): expected a Cell, got {type(net).__name__}")
    if not isinstance(parameter_dict, dict):
        raise TypeError(f"load_param_into_net(parameter_dict): expected a dict of Parameters, got "
                        f"{type(parameter_dict).__name__}")
    values = {k: v for k, v in parameter_dict.items() if not isinstance(v, str)}
    what = "load_param_into_net"
    param_not_load: list[str] = []
    ckpt_not_load = list(parameter_dict)
    variables = network_variables(net)
    for name, holder in variables:
        if name in values:
            assign(holder, name, _raw(name, values[name]), strict_load, what)
            ckpt_not_load.remove(name)
        elif isinstance(holder, Parameter):
            param_not_load.append(name)
    if param_not_load and not strict_load:
        _load_by_prefix(variables, values, param_not_load, ckpt_not_load, what)
    optimizer = optimizer_of(net)
    opt_values = {k[len(OPTIMIZER_PREFIX):]: _raw(k, v) for k, v in values.items() if k.startswith(OPTIMIZER_PREFIX)}
    if optimizer is not None and opt_values:
        for name in load_optimizer(optimizer, opt_values, what, net):
            ckpt_not_load.remove(OPTIMIZER_PREFIX + name)
    if param_not_load:
        notice_once(f"not-loaded:{id(net)}:{len(param_not_load)}", f"load_param_into_net: {len(param_not_load)} "
                    f"Parameter(s) of the net are not in the checkpoint and keep their values: {param_not_load}")
    return param_not_load, ckpt_not_load


def _load_by_prefix(variables, values, param_not_load, ckpt_not_load, what) -> None:
    """MindSpore's ``_load_dismatch_prefix_params``: find the prefix the checkpoint's names carry, load with it."""
    by_name = dict(variables)
    for missing in list(param_not_load):
        match = next((k for k in values if k.endswith("." + missing) and k in ckpt_not_load), None)
        if match is None:
            continue
        prefix = match[:-len(missing)]
        for name in list(param_not_load):
            if prefix + name in values and prefix + name in ckpt_not_load:
                assign(by_name[name], name, _raw(prefix + name, values[prefix + name]), False, what)
                param_not_load.remove(name)
                ckpt_not_load.remove(prefix + name)
        notice_once(f"prefix:{prefix}", f"load_param_into_net: the checkpoint's names carry the prefix {prefix!r}; "
                    "loaded them without it")
