"""Process-wide settings: ``set_context`` and ``set_auto_parallel_context`` with MindSpore's names and defaults.

The settings are read by the compile stage when a train step is built, never by passes at run time, so changing a
setting between two ``Model`` builds takes effect on the next build (as in MindSpore, where the context must be set
before the network is compiled).
"""

from __future__ import annotations

import copy
import functools
import logging
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from graphpar._logging import notice_once
from graphpar.errors import ConfigError, DeviceError, UnknownSettingError

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
DEVICE_TARGETS = ("CPU", "GPU", "TPU")
_JAX_PLATFORM = {"CPU": "cpu", "GPU": "gpu", "TPU": "tpu"}

# MindSpore settings that have no meaning on XLA. They are accepted so that ported scripts run, and each is named
# once in a log line the first time it is set.
_IGNORED_CONTEXT_KEYS = frozenset({
    "max_call_depth", "enable_graph_kernel", "graph_kernel_flags", "variable_memory_max_size",
    "enable_reduce_precision", "pynative_synchronize", "jit_level", "jit_config", "memory_optimize_level",
    "deterministic", "precompile_only", "enable_compile_cache", "compile_cache_path", "runtime_num_threads",
    "inter_op_parallel_num", "print_file_path", "env_config_path", "save_dump_path", "enable_dump",
    "ascend_config", "gpu_config", "mempool_block_size", "op_timeout", "enable_profiling", "profiling_options",
    "check_bprop", "enable_sparse", "reserve_class_name_in_scope", "auto_tune_mode", "disable_format_transform",
    "support_binary", "aoe_tune_mode", "aoe_config",
})
_IGNORED_PARALLEL_KEYS = frozenset({
    "gradient_fp32_sync", "all_reduce_fusion_config", "comm_fusion", "enable_alltoall", "loss_repeated_mean",
    "pipeline_result_broadcast", "group_ckpt_save_file", "optimizer_weight_shard_aggregated_save",
    "auto_pipeline",
})
_IGNORED_WHY = {  # keys whose "no effect" has another reason than XLA's own communication scheduling
    "loss_repeated_mean": "the gradient is that of the global batch's loss, computed once: MindSpore's default "
                          "loss_repeated_mean=True",
    "auto_pipeline": "pipeline stages come from pipeline_stages and each Cell's pipeline_stage; none are chosen "
                     "automatically",
    "pipeline_result_broadcast": "one process drives every stage and sees the last stage's result",
}


class _Revised:
    """Settings whose every assignment moves :func:`settings_revision` (``set_context``, the ``graphpar plan``
    CLI writing ``current()``'s fields, ``reset_*`` building new ones)."""

    def __setattr__(self, name: str, value: Any) -> None:
        global _settings_revision
        _settings_revision += 1
        object.__setattr__(self, name, value)


_settings_revision = 0  # see settings_revision()


def settings_revision() -> int:
    """How many settings assignments this process has made: equal between two calls means no setting changed.

    Only a Python-side "has anything changed?" check reads it: the training loop's fast path
    (``compile/runtime/bound_step.py``) compares it instead of every setting on every step, and when it moved goes to the
    general path, which compares the settings themselves. It never keys or invalidates a compiled program, so
    setting something unrelated costs one slower step, never a compile."""
    return _settings_revision


@dataclass
class Context(_Revised):
    mode: int = GRAPH_MODE
    device_target: str = "CPU"
    device_id: int = 0
    save_graphs: int = 0
    save_graphs_path: str = "ir_dumps"
    max_device_memory: str | None = None  # "xxGB": bounds AUTO_PARALLEL's search (None: no bound)
    # graphpar extension, set by `graphpar plan`: the first compiled step plans for this many virtual devices,
    # prints the plan and ends the script (graphpar.compile.plans.dry_run)
    plan_devices: int | None = None
    plan_platform: str = "gpu"
    plan_overrides: tuple = ()  # (key, value) pairs: parallel_mode / search_mode replacing the script's


@dataclass
class AutoParallelContext(_Revised):
    parallel_mode: str = ParallelMode.STAND_ALONE
    search_mode: str = "recursive_programming"
    gradients_mean: bool = False
    parameter_broadcast: bool = False
    device_num: int | None = None  # None: every device the job has
    global_rank: int | None = None
    dataset_strategy: Any = "data_parallel"  # "data_parallel", "full_batch" or a tuple of per-input splits
    strategy_ckpt_config: dict = field(default_factory=lambda: {
        "load_file": "", "save_file": "", "only_trainable_params": True})
    enable_parallel_optimizer: bool = False
    parallel_optimizer_config: dict = field(default_factory=lambda: dict(PARALLEL_OPTIMIZER_DEFAULTS))
    grad_accumulation_step: int = 1
    pipeline_stages: int = 1
    pipeline_config: dict = field(default_factory=lambda: {"pipeline_interleave": False,
                                                           "pipeline_scheduler": "1f1b"})

    @property
    def full_batch(self) -> bool:
        return self.dataset_strategy == "full_batch"

    @property
    def loads_full_batch(self) -> bool:
        """Whether every device loads the whole batch: ``full_batch`` in SEMI_AUTO / AUTO / HYBRID only. MindSpore's
        ``_need_to_full`` reads the dataset strategy in those modes alone; in DATA_PARALLEL each device's batch is
        its own slice whatever ``full_batch`` says."""
        return self.full_batch and self.parallel_mode in (ParallelMode.SEMI_AUTO_PARALLEL, ParallelMode.AUTO_PARALLEL,
                                                          ParallelMode.HYBRID_PARALLEL)


# MindSpore's parallel_optimizer_config keys and defaults (threshold in KB; shard size -1: the whole replica group)
PARALLEL_OPTIMIZER_DEFAULTS = {"parallel_optimizer_threshold": 64, "optimizer_weight_shard_size": -1,
                               "gradient_accumulation_shard": False, "optimizer_level": "level1"}
OPTIMIZER_LEVELS = ("level1", "level2", "level3")

_context = Context()
_auto_parallel = AutoParallelContext()


def _bool(api: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(api, key, value, valid=[True, False], reason=f"{key} must be a bool, got {value!r}")
    return value


def _check_platform(device_target: str) -> None:
    import jax  # local: importing graphpar must not start a backend

    from graphpar.communication.bootstrap import cluster_pending

    if cluster_pending():  # a backend may not start before init() joins the job; init() checks the platform then
        return
    platform = _JAX_PLATFORM[device_target]
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    if not devices:
        have = sorted({d.platform.upper() for d in jax.devices()})
        raise DeviceError(
            f"set_context(device_target={device_target!r}): JAX has no {platform} backend on this machine "
            f"(it has: {', '.join(have)}). Use device_target={have[0]!r}, or install the jax plugin for "
            f"{device_target} (e.g. pip install 'jax[cuda12]').")


def _check_device_id(device_id: int) -> None:
    """``device_id`` must name a device of this host: one of this process's devices times the processes of the
    host (one process per device, the seeds' way, gives each process DEVICE_ID = its device on the host). Deferred
    to ``init()`` while a multi-process job has not formed (no backend may start before)."""
    import jax

    from graphpar.communication.bootstrap import cluster_pending, placement

    if cluster_pending():
        return
    devices = jax.local_devices()
    host = len(devices) * placement().local_process_count
    if device_id >= host:
        raise DeviceError(f"set_context(device_id={device_id}): this host has {host} {devices[0].platform.upper()} "
                          f"device(s); valid device_id: 0..{host - 1} (graphpar uses every device of the job; "
                          "device_num in set_auto_parallel_context selects how many)")


def _check_writable_dir(api: str, key: str, path: str) -> None:
    """Refuse now a directory the dumps could not be written to (not at the first step, deep in the writer): it
    must be a writable directory, or not exist yet under a writable one (it is created when the first dump is
    written)."""
    import os

    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ConfigError(api, key, path, reason=f"{key}={path!r}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(api, key, path, reason=f"{key}={path!r}: the directory {probe} is not writable by this "
                          "process; give a directory you can write to")


def set_context(**kwargs: Any) -> None:
    """Set MindSpore's global context: ``mode``, ``device_target``, ``device_id``, ``save_graphs``,
    ``save_graphs_path``, ``max_device_memory``. Other MindSpore settings that mean nothing on XLA are accepted with
    a log line."""
    api = "set_context"
    valid = {"mode", "device_target", "device_id", "save_graphs", "save_graphs_path", "max_device_memory"}
    for key, value in kwargs.items():
        if key in _IGNORED_CONTEXT_KEYS:
            notice_once(f"context:{key}", f"set_context({key}=...) has no effect in graphpar (XLA decides this)",
                        logging.INFO)
            continue
        if key not in valid:
            raise UnknownSettingError(api, key, valid | _IGNORED_CONTEXT_KEYS)
        if key == "mode":
            if value not in (GRAPH_MODE, PYNATIVE_MODE) or isinstance(value, bool):
                raise ConfigError(api, key, value, valid=["GRAPH_MODE (0)", "PYNATIVE_MODE (1)"])
            _context.mode = value
        elif key == "device_target":
            if value == "Ascend":
                raise DeviceError("set_context(device_target='Ascend'): graphpar runs on XLA and has no Ascend "
                                  "backend; valid targets: 'CPU', 'GPU', 'TPU'")
            if value not in DEVICE_TARGETS:
                raise ConfigError(api, key, value, valid=DEVICE_TARGETS)
            _check_platform(value)
            _context.device_target = value
        elif key == "device_id":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(api, key, value, reason=f"device_id must be an int >= 0, got {value!r}")
            _check_device_id(value)
            _context.device_id = value
        elif key == "save_graphs":
            if isinstance(value, bool):
                value = int(value)
            if value not in (0, 1, 2, 3):
                raise ConfigError(api, key, value, valid=[False, True, 0, 1, 2, 3])
            _context.save_graphs = value
        elif key == "save_graphs_path":
            if not isinstance(value, str) or not value:
                raise ConfigError(api, key, value, reason="save_graphs_path must be a non-empty string")
            _check_writable_dir(api, key, value)
            _context.save_graphs_path = value
        elif key == "max_device_memory":
            from graphpar.planner.search.settings import parse_memory

            parse_memory(value)  # validated now, read when a plan is made
            _context.max_device_memory = value


def get_context(key: str) -> Any:
    valid = {"mode", "device_target", "device_id", "save_graphs", "save_graphs_path", "max_device_memory"}
    if key not in valid:
        raise UnknownSettingError("get_context", key, valid)
    return getattr(_context, key)


def _check_dataset_strategy(value: Any) -> Any:
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


def _check_parallel_optimizer_config(value: Any) -> dict:
    api, key = "set_auto_parallel_context", "parallel_optimizer_config"
    if not isinstance(value, dict) or not set(value) <= set(PARALLEL_OPTIMIZER_DEFAULTS):
        raise ConfigError(api, key, value, valid=[f"a dict with keys {', '.join(PARALLEL_OPTIMIZER_DEFAULTS)}"])
    out = {**_auto_parallel.parallel_optimizer_config, **value}
    threshold, size = out["parallel_optimizer_threshold"], out["optimizer_weight_shard_size"]
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0:
        raise ConfigError(api, key, value, reason=f"parallel_optimizer_threshold must be an int >= 0 (KB), got "
                                                  f"{threshold!r}")
    if not isinstance(size, int) or isinstance(size, bool) or not (size == -1 or size >= 1):
        raise ConfigError(api, key, value, reason=f"optimizer_weight_shard_size must be -1 (the whole "
                                                  f"data-parallel group) or an int >= 1, got {size!r}")
    _bool(api, "gradient_accumulation_shard", out["gradient_accumulation_shard"])
    if out["optimizer_level"] not in OPTIMIZER_LEVELS:
        raise ConfigError(api, key, value, valid=OPTIMIZER_LEVELS,
                          reason=f"optimizer_level {out['optimizer_level']!r} is not a level")
    return out


PIPELINE_SCHEDULERS = ("1f1b", "gpipe")


def _check_pipeline_config(value: Any) -> dict:
    """MindSpore's ``pipeline_config={"pipeline_interleave": bool, "pipeline_scheduler": "1f1b" | "gpipe"}``."""
    api, key = "set_auto_parallel_context", "pipeline_config"
    if not isinstance(value, dict) or not set(value) <= {"pipeline_interleave", "pipeline_scheduler"}:
        raise ConfigError(api, key, value, valid=["a dict with keys pipeline_interleave, pipeline_scheduler"])
    interleave = value.get("pipeline_interleave", False)
    if not isinstance(interleave, bool):
        raise ConfigError(api, key, value, reason=f"pipeline_interleave must be a bool, got {interleave!r}")
    if interleave:
        raise ConfigError(api, key, value, valid=["pipeline_interleave=False"],
                          reason="the interleaved (virtual-stage) pipeline scheduler is not built in graphpar; "
                                 "use pipeline_interleave=False with pipeline_scheduler '1f1b' or 'gpipe'")
    scheduler = value.get("pipeline_scheduler", "1f1b")
    if scheduler not in PIPELINE_SCHEDULERS:
        raise ConfigError(api, key, value, valid=[f"pipeline_scheduler={s!r}" for s in PIPELINE_SCHEDULERS],
                          reason=f"pipeline_scheduler {scheduler!r} is not built in graphpar (MindSpore's "
                                 "seqpipe/seqvpp/seqsmartvpp/zero_bubble_v need interleaving)")
    return {"pipeline_interleave": interleave, "pipeline_scheduler": scheduler}


def set_auto_parallel_context(**kwargs: Any) -> None:
    """Set MindSpore's auto-parallel context. See ``docs/porting_from_mindspore.md`` for every difference."""
    api = "set_auto_parallel_context"
    valid = {"parallel_mode", "search_mode", "auto_parallel_search_mode", "gradients_mean", "parameter_broadcast",
             "device_num", "global_rank", "dataset_strategy", "full_batch", "strategy_ckpt_config",
             "strategy_ckpt_load_file", "strategy_ckpt_save_file", "enable_parallel_optimizer", "pipeline_stages",
             "parallel_optimizer_config", "optimizer_weight_shard_size", "grad_accumulation_step", "pipeline_config"}
    for key, value in kwargs.items():
        if key == "sharding_propagation":  # MindSpore 1.x spelling, applied after the loop: True propagates
            _bool(api, key, value)         # whatever search_mode says (MindSpore's edge cost: use_sp = either)
            continue
        if key in _IGNORED_PARALLEL_KEYS:
            notice_once(f"parallel:{key}", f"set_auto_parallel_context({key}=...) has no effect in graphpar "
                        f"({_IGNORED_WHY.get(key, 'XLA schedules and fuses communication itself')})", logging.INFO)
            continue
        if key not in valid:
            raise UnknownSettingError(api, key, valid | _IGNORED_PARALLEL_KEYS | {"sharding_propagation"})
        if key == "parallel_mode":
            if value not in ParallelMode.MODE_LIST:
                raise ConfigError(api, key, value, valid=ParallelMode.MODE_LIST)
            _auto_parallel.parallel_mode = value
        elif key in ("search_mode", "auto_parallel_search_mode"):
            if value not in SEARCH_MODES:
                raise ConfigError(api, key, value, valid=SEARCH_MODES)
            _auto_parallel.search_mode = value
        elif key in ("gradients_mean", "parameter_broadcast", "enable_parallel_optimizer"):
            setattr(_auto_parallel, key, _bool(api, key, value))
        elif key == "parallel_optimizer_config":
            _auto_parallel.parallel_optimizer_config = _check_parallel_optimizer_config(value)
        elif key == "optimizer_weight_shard_size":  # MindSpore 1.x spelling of the same setting
            _auto_parallel.parallel_optimizer_config = _check_parallel_optimizer_config(
                {"optimizer_weight_shard_size": value})
        elif key == "grad_accumulation_step":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(api, key, value, reason=f"grad_accumulation_step must be an int >= 1, got "
                                                          f"{value!r}")
            _auto_parallel.grad_accumulation_step = value
        elif key == "device_num":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(api, key, value, reason=f"device_num must be an int >= 1, got {value!r}")
            _auto_parallel.device_num = value
        elif key == "global_rank":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(api, key, value, reason=f"global_rank must be an int >= 0, got {value!r}")
            _auto_parallel.global_rank = value
            notice_once("parallel:global_rank", "set_auto_parallel_context(global_rank=...) is kept for "
                        "get_auto_parallel_context but picks nothing: a process's ranks are its devices' places in "
                        "the job (get_rank())", logging.INFO)
        elif key == "dataset_strategy":
            _auto_parallel.dataset_strategy = _check_dataset_strategy(value)
        elif key == "full_batch":
            _auto_parallel.dataset_strategy = "full_batch" if _bool(api, key, value) else "data_parallel"
        elif key == "pipeline_stages":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(api, key, value, reason=f"pipeline_stages must be an int >= 1, got {value!r}")
            _auto_parallel.pipeline_stages = value
        elif key == "pipeline_config":
            _auto_parallel.pipeline_config = _check_pipeline_config(value)
        elif key == "strategy_ckpt_config":
            if not isinstance(value, dict) or not set(value) <= {"load_file", "save_file", "only_trainable_params"}:
                raise ConfigError(api, key, value, valid=["a dict with keys load_file, save_file, "
                                                          "only_trainable_params"])
            _auto_parallel.strategy_ckpt_config = {**_auto_parallel.strategy_ckpt_config, **value}
        elif key in ("strategy_ckpt_load_file", "strategy_ckpt_save_file"):
            which = key.split("_")[-2] + "_file"
            _auto_parallel.strategy_ckpt_config = {**_auto_parallel.strategy_ckpt_config, which: value}
    if kwargs.get("sharding_propagation") is True:
        _auto_parallel.search_mode = "sharding_propagation"


_PARALLEL_GETTERS = {"parallel_mode", "search_mode", "gradients_mean", "parameter_broadcast", "device_num",
                     "global_rank", "dataset_strategy", "full_batch", "strategy_ckpt_config",
                     "enable_parallel_optimizer", "pipeline_stages", "parallel_optimizer_config",
                     "grad_accumulation_step", "pipeline_config"}


def get_auto_parallel_context(key: str) -> Any:
    if key == "auto_parallel_search_mode":
        key = "search_mode"
    if key not in _PARALLEL_GETTERS:
        raise UnknownSettingError("get_auto_parallel_context", key, _PARALLEL_GETTERS)
    if key == "device_num" and _auto_parallel.device_num is None:
        import jax

        return jax.device_count()
    if key == "global_rank" and _auto_parallel.global_rank is None:
        from graphpar.communication import get_rank

        return get_rank()
    # a copy: changing the returned dict in place must not change a setting behind set_auto_parallel_context
    return copy.deepcopy(getattr(_auto_parallel, key))


def reset_auto_parallel_context() -> None:
    """Restore every auto-parallel setting to its default."""
    global _auto_parallel
    _auto_parallel = AutoParallelContext()


def reset_context() -> None:
    """Restore ``set_context`` settings to their defaults (graphpar extension, handy in tests and notebooks)."""
    global _context
    _context = Context()


def current() -> Context:
    return _context


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _frozen(value: Any) -> Any:
    if type(value) in _ATOMS:
        return value
    if isinstance(value, dict):
        return tuple(sorted([(k, _frozen(v)) for k, v in value.items()]))
    if isinstance(value, (list, tuple)):
        return tuple([_frozen(v) for v in value])
    return value


_NOT_COMPILED = frozenset({"save_graphs", "save_graphs_path"})  # dumps describe a program, never change it


@functools.cache
def _compiled_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.name not in _NOT_COMPILED)


def compile_key() -> tuple:
    """Every setting a compiled program depends on, as one hashable value (read without copying: it is checked
    on every step, so it stays a few microseconds). ``save_graphs`` is not part of it: dumping never changes the
    program that runs."""
    own = tuple([getattr(_context, name) for name in _compiled_fields(type(_context))])
    return own + tuple([_frozen(getattr(_auto_parallel, name)) for name in _compiled_fields(type(_auto_parallel))])


def settings() -> tuple:
    """The settings :func:`compile_key` reads, as they are (dicts not frozen): cheaper to build and to compare
    (``==`` compares dicts by value) for a per-step "has anything changed" check against a deep copy taken when a
    program was chosen. Equal settings give equal compile keys."""
    return _fields_getter(type(_context))(_context) + _fields_getter(type(_auto_parallel))(_auto_parallel)


@functools.cache
def _fields_getter(cls: type) -> Callable[[Any], tuple]:
    """Reads :func:`_compiled_fields` of an instance into a tuple in one C-level call (settings() runs per step)."""
    get = operator.attrgetter(*_compiled_fields(cls))
    return get if len(_compiled_fields(cls)) > 1 else lambda obj: (get(obj),)


def current_parallel() -> AutoParallelContext:
    """A copy of the auto-parallel settings as they are now (the compile stage snapshots them)."""
    return copy.deepcopy(_auto_parallel)
