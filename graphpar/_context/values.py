"""What each setting of ``set_context`` / ``set_auto_parallel_context`` accepts: MindSpore's names, choices and
defaults, the MindSpore settings that mean nothing on XLA, and the checks of one value (pure functions: the
settings themselves live in ``graphpar._context.state``).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from graphpar._logging import notice_once
from graphpar.errors import ConfigError, SettingTypeError

GRAPH_MODE = 0
PYNATIVE_MODE = 1


class ParallelMode:
    """Parallel modes, spelled as MindSpore spells them (``ParallelMode.DATA_PARALLEL == "data_parallel"``)."""

    STAND_ALONE = "stand_alone"
    DATA_PARALLEL = "data_parallel"
    SEMI_AUTO_PARALLEL = "semi_auto_parallel"
    AUTO_PARALLEL = "auto_parallel"
    HYBRID_PARALLEL = "hybrid_parallel"
    MODE_LIST = [STAND_ALONE, DATA_PARALLEL, SEMI_AUTO_PARALLEL, AUTO_PARALLEL, HYBRID_PARALLEL]


SEARCH_MODES = ("sharding_propagation", "dynamic_programming", "recursive_programming")
# graphpar's own set_auto_parallel_context key: the order sharding propagation walks in (planner.passes.propagate).
# "hints_first" (graphpar's default): every shard() hint at once, then the dataset; "mindspore": MindSpore's
# CostGraph::StrategyPropagate order, one walk per configured op by operator name, the dataset last
PROPAGATION_ORDERS = ("hints_first", "mindspore")
DEVICE_TARGETS = ("CPU", "GPU", "TPU")

# MindSpore settings that have no meaning on XLA. They are accepted so that ported scripts run, and each is named
# once in a log line the first time it is set.
IGNORED_CONTEXT_KEYS = frozenset({
    "max_call_depth", "enable_graph_kernel", "graph_kernel_flags", "variable_memory_max_size",
    "enable_reduce_precision", "pynative_synchronize", "jit_level", "jit_config", "memory_optimize_level",
    "deterministic", "precompile_only", "runtime_num_threads",
    "inter_op_parallel_num", "print_file_path", "env_config_path", "save_dump_path", "enable_dump",
    "ascend_config", "gpu_config", "mempool_block_size", "op_timeout", "enable_profiling", "profiling_options",
    "check_bprop", "enable_sparse", "reserve_class_name_in_scope", "auto_tune_mode", "support_binary", "aoe_tune_mode", "aoe_config",
})
IGNORED_PARALLEL_KEYS = frozenset({
    "gradient_fp32_sync", "all_reduce_fusion_config", "enable_alltoall", "loss_repeated_mean",
    "pipeline_result_broadcast", "group_ckpt_save_file", "optimizer_weight_shard_aggregated_save",
})
def check_auto_pipeline(value: Any) -> bool:
    """``auto_pipeline``: a bool; True is said once (what it does here: the stage search of the plans)."""
    if check_bool("set_auto_parallel_context", "auto_pipeline", value):
        notice_once("parallel:auto_pipeline", AUTO_PIPELINE_NOTE, logging.INFO)
    return value


AUTO_PIPELINE_NOTE = ("set_auto_parallel_context(auto_pipeline=True): in AUTO_PARALLEL, graphpar plan and "
                      "plan_for_devices search pipeline stages, micro-batches, recompute and optimizer sharding (the "
                      "plan summary's stage table); a training run pipelines as pipeline_stages and each Cell's "
                      "pipeline_stage say")
IGNORED_WHY = {  # keys whose "no effect" has another reason than XLA's own communication scheduling
    "loss_repeated_mean": "the gradient is that of the global batch's loss, computed once: MindSpore's default "
                          "loss_repeated_mean=True",
    "pipeline_result_broadcast": "one process drives every stage and sees the last stage's result",
}

# MindSpore's parallel_optimizer_config keys and defaults (threshold in KB; shard size -1: the whole replica group)
PARALLEL_OPTIMIZER_DEFAULTS = {"parallel_optimizer_threshold": 64, "optimizer_weight_shard_size": -1,
                               "gradient_accumulation_shard": False, "optimizer_level": "level1"}
OPTIMIZER_LEVELS = ("level1", "level2", "level3")
PIPELINE_SCHEDULERS = ("1f1b", "gpipe", "zero_bubble_v")
SEQUENCE_SCHEDULERS = ("seqpipe", "seqvpp", "seqsmartvpp")  # MindSpore schedules graphpar refuses by name
# set_context(format_transform=...): where NCHW convolutions run channels-last (graphpar.compile.lowering.channels_last)
FORMAT_TRANSFORMS = ("auto", "channels_last", "off")
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GB\s*$")


def parse_memory(text: str, api: str = "set_context", key: str = "max_device_memory") -> float:
    """Bytes of a MindSpore memory size such as ``"30GB"`` or ``"0.5GB"`` (1 GB = 1024**3 bytes). ``api`` and
    ``key`` name the setting in the error (``runtime.set_memory(max_size=...)`` is the same setting)."""
    m = _MEMORY.match(text) if isinstance(text, str) else None
    if m is None or float(m.group(1)) <= 0:
        raise ConfigError(api, key, text,
                          reason=f"{key} must be a positive size in the format 'xxGB' (e.g. '30GB', "
                                 f"'0.5GB'), got {text!r}")
    return float(m.group(1)) * 1024 ** 3


def check_bool(api: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(api, key, value, valid=[True, False], reason=f"{key} must be a bool, got {value!r}")
    return value


def check_int_at_least(api: str, key: str, value: Any, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(api, key, value, reason=f"{key} must be an int >= {low}, got {value!r}")
    return value


def check_choice(api: str, key: str, value: Any, choices) -> Any:
    if value not in choices:
        raise ConfigError(api, key, value, valid=choices)
    return value


def check_writable_dir(api: str, key: str, path: str) -> None:
    """Refuse now a directory the dumps could not be written to (not at the first step, deep in the writer): it
    must be a writable directory, or not exist yet under a writable one (it is created when the first dump is
    written)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ConfigError(api, key, path, reason=f"{key}={path!r}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(api, key, path, reason=f"{key}={path!r}: the directory {probe} is not writable by this "
                          "process; give a directory you can write to")


def check_format_transform(value: Any) -> str:
    """``format_transform``: "auto" (channels-last on GPUs, as MindSpore's GPU backend transforms NCHW to NHWC),
    "channels_last" (on every platform) or "off" (convolutions run as written)."""
    if value not in FORMAT_TRANSFORMS or not isinstance(value, str):
        raise ConfigError("set_context", "format_transform", value, valid=FORMAT_TRANSFORMS)
    return value


def check_dataset_strategy(value: Any) -> Any:
    api = "set_auto_parallel_context"
    if value in ("data_parallel", "full_batch"):
        return value
    ok = isinstance(value, tuple) and all(
        isinstance(s, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in s)
        for s in value)
    if not ok:
        raise ConfigError(api, "dataset_strategy", value,
                          valid=["'data_parallel'", "'full_batch'", "a tuple of tuples of positive ints, one per "
                                 "input, e.g. ((8, 1), (8,))"])
    return value


def check_parallel_optimizer_config(value: Any, current: dict) -> dict:
    """``value`` merged over the ``current`` config, checked."""
    api, key = "set_auto_parallel_context", "parallel_optimizer_config"
    if not isinstance(value, dict) or not set(value) <= set(PARALLEL_OPTIMIZER_DEFAULTS):
        raise ConfigError(api, key, value, valid=[f"a dict with keys {', '.join(PARALLEL_OPTIMIZER_DEFAULTS)}"])
    out = {**current, **value}
    threshold, size = out["parallel_optimizer_threshold"], out["optimizer_weight_shard_size"]
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0:
        raise ConfigError(api, key, value, reason=f"parallel_optimizer_threshold must be an int >= 0 (KB), got "
                                                  f"{threshold!r}")
    if not isinstance(size, int) or isinstance(size, bool) or not (size == -1 or size >= 1):
        raise ConfigError(api, key, value, reason=f"optimizer_weight_shard_size must be -1 (the whole "
                                                  f"data-parallel group) or an int >= 1, got {size!r}")
    check_bool(api, "gradient_accumulation_shard", out["gradient_accumulation_shard"])
    if out["optimizer_level"] not in OPTIMIZER_LEVELS:
        raise ConfigError(api, key, value, valid=OPTIMIZER_LEVELS,
                          reason=f"optimizer_level {out['optimizer_level']!r} is not a level")
    return out


def check_pipeline_config(value: Any, api: str = "set_auto_parallel_context") -> dict:
    """MindSpore's ``pipeline_config={"pipeline_interleave": bool, "pipeline_scheduler": str}``: "1f1b" or "gpipe"
    without interleaving; "1f1b" (interleaved 1F1B) or "zero_bubble_v" with it. MindSpore's sequence-split
    schedules ("seqpipe", "seqvpp", "seqsmartvpp") are refused by name. ``api``: who the errors name."""
    key = "pipeline_config"
    if not isinstance(value, dict) or not set(value) <= {"pipeline_interleave", "pipeline_scheduler"}:
        raise ConfigError(api, key, value, valid=["a dict with keys pipeline_interleave, pipeline_scheduler"])
    interleave = value.get("pipeline_interleave", False)
    if not isinstance(interleave, bool):
        raise ConfigError(api, key, value, reason=f"pipeline_interleave must be a bool, got {interleave!r}")
    scheduler = value.get("pipeline_scheduler", "1f1b")
    valid = [f"pipeline_scheduler={s!r}" for s in PIPELINE_SCHEDULERS]
    if scheduler in SEQUENCE_SCHEDULERS:
        raise ConfigError(api, key, value, valid=valid,
                          reason=f"pipeline_scheduler {scheduler!r} (MindSpore's schedule that also splits the "
                                 "sequence dimension into pipelined chunks) is not built in graphpar")
    if scheduler not in PIPELINE_SCHEDULERS:
        raise ConfigError(api, key, value, valid=valid, reason=f"pipeline_scheduler {scheduler!r} is not a schedule")
    if interleave and scheduler == "gpipe":
        raise ConfigError(api, key, value, valid=["pipeline_interleave=True with pipeline_scheduler '1f1b' or "
                                                  "'zero_bubble_v'", "pipeline_interleave=False with 'gpipe'"],
                          reason="the interleaved (virtual-stage) pipeline runs the 1f1b or zero_bubble_v schedule")
    if scheduler == "zero_bubble_v" and not interleave:
        raise ConfigError(api, key, value, valid=["pipeline_interleave=True with pipeline_scheduler "
                                                  "'zero_bubble_v'"],
                          reason="zero_bubble_v places two segments (virtual stages) per stage in a V, so it needs "
                                 "pipeline_interleave=True")
    return {"pipeline_interleave": interleave, "pipeline_scheduler": scheduler}




_FUSION_MODES = {"allreduce": ("auto", "index", "size"), "allgather": ("auto", "size"),
                 "reducescatter": ("auto", "size")}


def comm_fusion_default() -> dict:
    """MindSpore's ``comm_fusion`` default (its ``_ParallelFusionConfig.CONFIG``)."""
    return {"openstate": True, **{kind: {"mode": "auto", "config": None} for kind in _FUSION_MODES}}


def check_comm_fusion(value: Any, current: dict) -> dict:
    """``comm_fusion``: checked as MindSpore checks it (``openstate`` a bool; each of ``allreduce``, ``allgather``,
    ``reducescatter`` a dict with ``mode`` and ``config``; a ``size`` threshold an int in MB, ``index`` split
    indices a list of ints) and kept for ``get_auto_parallel_context``; the given keys replace the current ones.
    It changes no program: XLA's collective combiners fuse communication (said once)."""
    api, key = "set_auto_parallel_context", "comm_fusion"
    if not isinstance(value, dict):
        raise SettingTypeError(api, key, value, reason=f"comm_fusion must be a dict, got {type(value).__name__}")
    merged = {**current, "openstate": True}  # MindSpore adds openstate=True when it is not given
    for kind, config in value.items():
        if kind == "openstate":
            if not isinstance(config, bool):
                raise SettingTypeError(api, key, value, reason=f"comm_fusion's 'openstate' must be a bool, got "
                                                               f"{config!r}")
        elif kind not in _FUSION_MODES:
            raise ConfigError(api, key, value, reason=f"comm_fusion has no key {kind!r}",
                              valid=["openstate", *_FUSION_MODES])
        elif not isinstance(config, dict) or set(config) != {"mode", "config"}:
            raise SettingTypeError(api, key, value, reason=f"comm_fusion's {kind!r} must be a dict with the keys "
                                                           f"'mode' and 'config', got {config!r}")
        elif config["mode"] not in _FUSION_MODES[kind]:
            raise ConfigError(api, key, value, reason=f"comm_fusion's {kind!r} mode {config['mode']!r} is not valid",
                              valid=_FUSION_MODES[kind])
        elif config["mode"] == "size" and (isinstance(config["config"], bool) or not isinstance(config["config"], int)
                                           or config["config"] < 0):
            raise SettingTypeError(api, key, value, reason=f"comm_fusion's {kind!r} size threshold (config, in MB) "
                                                           f"must be an int >= 0, got {config['config']!r}")
        elif config["mode"] == "index" and (not isinstance(config["config"], list) or any(
                isinstance(i, bool) or not isinstance(i, int) for i in config["config"])):
            raise SettingTypeError(api, key, value, reason=f"comm_fusion's {kind!r} split indices (config) must be "
                                                           f"a list of ints, got {config['config']!r}")
        merged[kind] = dict(config) if kind != "openstate" else config
    notice_once("parallel:comm_fusion", "set_auto_parallel_context(comm_fusion=...) is kept for "
                "get_auto_parallel_context but has no effect in graphpar (XLA's collective combiners fuse "
                "communication)", logging.INFO)
    return merged
