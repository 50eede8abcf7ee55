"""Checkpoints across layouts and device counts: MindSpore's ``merge_sliced_parameter``,
``build_searched_strategy``, ``transform_checkpoints`` and ``load_distributed_checkpoint``.

Every graphpar checkpoint records which part of each tensor each of its rows is, so merging never needs the
training strategy file: rows from any set of checkpoints (one sliced checkpoint of 8 ranks, or 8 per-rank
checkpoints written by ``transform_checkpoints``) are copied into place. Strategy files matter for the other
direction, cutting whole tensors into a target plan's slices.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphpar.checkpoint import directory as ckpt_dir
from graphpar.checkpoint import manifest, rank_views, store
from graphpar.checkpoint.entries import OPTIMIZER_PREFIX, Entry
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.serialization import SUFFIX, checkpoint_path, load_param_into_net, read_manifest
from graphpar.checkpoint.slices import merge_rows
from graphpar.common.parameter import Parameter
from graphpar.planner import strategy_file
from graphpar.planner.strategy_file import ParameterLayout
from graphpar.planner.tensor_layout import slices_to_json


def build_searched_strategy(strategy_filename: str) -> dict[str, ParameterLayout]:
    """``{parameter name: ParameterLayout}`` from a strategy file written by ``strategy_ckpt_config['save_file']``."""
    if not isinstance(strategy_filename, str):
        raise TypeError(f"build_searched_strategy(strategy_filename): expected a str, got "
                        f"{type(strategy_filename).__name__}")
    if not os.path.isfile(strategy_filename):
        raise ValueError(f"build_searched_strategy: no such strategy file: {strategy_filename}")
    if os.path.getsize(strategy_filename) == 0:
        raise ValueError(f"build_searched_strategy: the strategy file {strategy_filename} is empty")
    layouts = strategy_file.read(strategy_filename).layouts
    if not layouts:
        raise ValueError(f"build_searched_strategy: the strategy file {strategy_filename} has no parameter layouts")
    return layouts


def _layout_of(value: Any, name: str) -> ParameterLayout:
    if isinstance(value, ParameterLayout):
        return value
    if isinstance(value, dict) and {"dev_matrix", "tensor_map"} <= set(value):
        return ParameterLayout(list(value["dev_matrix"]), list(value["tensor_map"]),
                               list(value.get("tensor_shape", [])))
    raise TypeError(f"merge_sliced_parameter(strategy): the layout of '{name}' must be a ParameterLayout (from "
                    f"build_searched_strategy) or a dict with dev_matrix and tensor_map, got {type(value).__name__}")


def merge_sliced_parameter(sliced_parameters: Sequence[Parameter], strategy: dict | None = None) -> Parameter:
    """One whole Parameter from its slices, given in rank order. Without ``strategy`` the slices are concatenated
    along dimension 0; with it (``{name: layout}``) each rank's slice goes where the layout puts it."""
    if not isinstance(sliced_parameters, (list, tuple)) or not sliced_parameters:
        raise TypeError("merge_sliced_parameter(sliced_parameters): expected a non-empty list of Parameters")
    if not all(isinstance(p, Parameter) for p in sliced_parameters):
        raise TypeError("merge_sliced_parameter(sliced_parameters): every item must be a Parameter")
    name = sliced_parameters[0].name
    if any(p.name != name for p in sliced_parameters):
        raise ValueError(f"merge_sliced_parameter: the slices have different names "
                         f"{sorted({p.name for p in sliced_parameters})}; give the slices of one parameter")
    data = [p.asnumpy() for p in sliced_parameters]
    if strategy is None:
        return Parameter(np.concatenate(data, axis=0), name=name, requires_grad=sliced_parameters[0].requires_grad)
    if not isinstance(strategy, dict):
        raise TypeError(f"merge_sliced_parameter(strategy): expected a dict, got {type(strategy).__name__}")
    if name not in strategy:
        raise KeyError(f"merge_sliced_parameter: '{name}' is not in the strategy (it has {sorted(strategy)[:6]})")
    layout = _layout_of(strategy[name], name)
    ranks = int(np.prod(layout.dev_matrix))
    if len(data) != ranks:
        raise ValueError(f"merge_sliced_parameter: '{name}' has device matrix {layout.dev_matrix} ({ranks} ranks) "
                         f"but {len(data)} slices were given; give one slice per rank, in rank order")
    shape = list(layout.tensor_shape) or [d * s for d, s in zip(data[0].shape, _splits(layout, data[0].ndim))]
    merged = merge_rows(name, shape, data[0].dtype, list(zip(layout.rank_slices(shape), data)))
    if merged is None:
        raise ValueError(f"merge_sliced_parameter: the slices of '{name}' do not cover its shape {tuple(shape)}")
    return Parameter(merged, name=name, requires_grad=sliced_parameters[0].requires_grad)


def _splits(layout: ParameterLayout, ndim: int) -> list[int]:
    m = len(layout.dev_matrix)
    out = []
    for entry in layout.tensor_map:
        entries = [] if entry == -1 else (list(entry) if isinstance(entry, (list, tuple)) else [entry])
        out.append(int(np.prod([layout.dev_matrix[m - 1 - t] for t in entries])) if entries else 1)
    return out + [1] * (ndim - len(out))


def _sources(path: str) -> list[str]:
    """A checkpoint, or a directory of them (``rank_*/`` subdirectories or checkpoints side by side)."""
    path = os.fspath(path)
    if os.path.exists(os.path.join(path, manifest.MANIFEST)):
        return [path]
    ranks = sorted((d for d in os.listdir(path) if d.startswith("rank_") and os.path.isdir(os.path.join(path, d))),
                   key=lambda d: int(d[5:]) if d[5:].isdigit() else d) if os.path.isdir(path) else []
    found = [ckpt_dir.latest_checkpoint(os.path.join(path, d)) for d in ranks] if ranks else [
        p for _, p, _ in ckpt_dir.complete_checkpoints(path)]
    found = [p for p in found if p]
    if not found:
        raise CheckpointError(path, "no complete checkpoint found in it (looked for a graphpar.json manifest, "
                              "rank_*/ subdirectories and *.ckpt directories)")
    return found


def _by_checkpoint(paths: Sequence[str]) -> dict[str, tuple[dict, set[int] | None]]:
    """``{checkpoint: (manifest, ranks wanted or None for all)}``: per-rank views (``rank_k/x.ckpt`` naming
    ``rank_0/x.ckpt``, :mod:`rank_views`) grouped by the checkpoint they name, so that it is read once."""
    wanted: dict[str, tuple[dict, set[int] | None]] = {}
    for path in paths:
        target, body, rank = read_manifest(path)
        key = os.path.abspath(target)
        _, ranks = wanted.get(key, (body, set()))
        wanted[key] = (body, None if rank is None or ranks is None else ranks | {rank})
    return wanted


def gather(paths: Sequence[str], groups: Sequence[str] = ("network", "optimizer", "append")) -> dict:
    """``{(group, name): (record, whole numpy array)}`` merged from the rows of every checkpoint in ``paths``."""
    rows: dict[tuple[str, str], list] = {}
    records: dict[tuple[str, str], dict] = {}
    for path, (body, ranks) in _by_checkpoint(paths).items():
        body, arrays = rank_views.select_rows(path, body, store.read_arrays(path, body, groups), ranks)
        for record in body["entries"]:
            if record["group"] not in groups:
                continue
            key = (record["group"], record["name"])
            data = arrays[record["group"]][record["name"]]
            records.setdefault(key, record)
            if body.get("layout") == "sliced":
                rows.setdefault(key, []).extend(zip(record["slices"], data))
            else:
                rows.setdefault(key, []).append(([[0, n] for n in record["shape"]], data))
    out = {}
    for key, record in records.items():
        whole = merge_rows(key[1], record["shape"], rows[key][0][1].dtype, rows[key])
        if whole is None:
            raise CheckpointError(paths[0], f"the given checkpoints do not hold all of '{key[1]}' "
                                  f"{tuple(record['shape'])}", "Give the checkpoints of every rank")
        out[key] = (record, whole)
    return out


def _entry_name(group: str, name: str) -> str:
    return OPTIMIZER_PREFIX + name if group == "optimizer" else name


def load_distributed_checkpoint(network: Any, checkpoint_filenames: Any = None, predict_strategy: Any = None,
                                train_strategy_filename: str | None = None, strict_load: bool = False,
                                dec_key: Any = None, dec_mode: str = "AES-GCM", format: str = "ckpt",
                                **kwargs: Any) -> Any:
    """Load the checkpoints of a distributed run (per-rank files in rank order, or one sliced checkpoint) into
    ``network``, whatever plan and device count it now runs with. graphpar places the whole tensors by the
    network's own plan, so ``predict_strategy`` and ``train_strategy_filename`` are accepted and not needed."""
    if dec_key is not None or format != "ckpt":
        raise ValueError("load_distributed_checkpoint: encrypted or non-'ckpt' formats are not supported by graphpar")
    if isinstance(checkpoint_filenames, (str, os.PathLike)):
        checkpoint_filenames = [checkpoint_filenames]
    if not checkpoint_filenames:
        raise ValueError("load_distributed_checkpoint(checkpoint_filenames): give the checkpoints of every rank, in "
                         "rank order")
    paths = [checkpoint_path(os.fspath(p), must_exist=True) for p in checkpoint_filenames]
    merged = gather(paths)
    params = {_entry_name(g, n): Parameter(whole, name=_entry_name(g, n), requires_grad=bool(r.get("trainable")))
              for (g, n), (r, whole) in merged.items()}
    load_param_into_net(network, params, strict_load)
    return params if kwargs.get("return_param_dict") else None


def transform_checkpoints(src_checkpoints_dir: str, dst_checkpoints_dir: str, ckpt_prefix: str,
                          src_strategy_file: str | None = None, dst_strategy_file: str | None = None,
                          process_num: int = 1, output_format: str = "ckpt") -> None:
    """Rewrite the checkpoint(s) in ``src_checkpoints_dir`` for another plan: for each rank ``r`` of the plan in
    ``dst_strategy_file``, ``{dst}/rank_{r}/{ckpt_prefix}{r}.ckpt`` holding that rank's slices (state the file
    does not lay out is whole); without ``dst_strategy_file`` one whole checkpoint ``{dst}/rank_0/{prefix}0.ckpt``.
    The source layout comes from the checkpoints themselves (``src_strategy_file`` is not needed)."""
    if output_format != "ckpt":
        raise ValueError(f"transform_checkpoints(output_format={output_format!r}): valid: 'ckpt'")
    merged = gather(_sources(src_checkpoints_dir))
    layouts = build_searched_strategy(dst_strategy_file) if dst_strategy_file else {}
    counts = {int(np.prod(layout.dev_matrix)) for layout in layouts.values()}
    if len(counts) > 1:
        raise ValueError(f"transform_checkpoints: the layouts of {dst_strategy_file} use different device counts "
                         f"{sorted(counts)}")
    ranks = counts.pop() if counts else 1
    for rank in range(ranks):
        entries = []
        for (group, name), (record, whole) in merged.items():
            layout = layouts.get(name) if group == "network" else None
            index = layout.rank_slices(whole.shape)[rank] if layout is not None else tuple(slice(0, n)
                                                                                          for n in whole.shape)
            entries.append(Entry(name, group, whole[index][None], bool(record.get("trainable")),
                                 slices=[slices_to_json(index, whole.shape)], global_shape=tuple(whole.shape)))
        path = os.path.join(dst_checkpoints_dir, f"rank_{rank}", f"{ckpt_prefix}{rank}{SUFFIX}")
        store.write(path, entries, integrated=False, row_ranks=[rank])
