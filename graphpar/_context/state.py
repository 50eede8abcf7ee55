"""The process-wide settings and their API: ``set_context`` and ``set_auto_parallel_context`` with MindSpore's
names and defaults (what each value may be is ``values``; the checks against this machine's devices ``devices``).

The settings are read by the compile stage when a train step is built, never by passes at run time, so changing a
setting between two ``Model`` builds takes effect on the next build (as in MindSpore, where the context must be set
before the network is compiled).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

import jax

from graphpar._context.algo import OpStrategyConfig, current_algo, current_op_strategy_config, use_op_strategy_config
from graphpar._context.cache_dir import CompileCache, resolve_compile_cache
from graphpar._context.devices import ascend_stand_in, check_device_id, check_platform
from graphpar._context.typecheck import SET_CONTEXT_TYPES, args_type_check
from graphpar._context.cost_model import current_cost_model
from graphpar._context.values import (
    DEVICE_TARGETS, GRAPH_MODE, IGNORED_CONTEXT_KEYS, IGNORED_PARALLEL_KEYS, IGNORED_WHY, PARALLEL_OPTIMIZER_DEFAULTS,
    PROPAGATION_ORDERS, PYNATIVE_MODE, SEARCH_MODES, ParallelMode, check_auto_pipeline, check_bool, check_choice,
    check_dataset_strategy, check_format_transform, check_int_at_least, check_parallel_optimizer_config,
    check_pipeline_config, check_writable_dir, parse_memory, check_comm_fusion, comm_fusion_default)
from graphpar import _env
from graphpar._logging import notice_once
from graphpar.errors import ConfigError, GraphparError, UnknownSettingError


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
    ascend: bool = False  # device_target="Ascend" was asked for: MindSpore's Ascend checks apply (ascend_groups)
    device_id: int = 0
    save_graphs_setting: int = 0  # set_context(save_graphs=...); read through save_graphs
    save_graphs_path_setting: str = "ir_dumps"  # set_context(save_graphs_path=...); read through save_graphs_path
    max_device_memory: str | None = None  # "xxGB": bounds AUTO_PARALLEL's search (None: no bound)
    enable_compile_cache_setting: bool | None = None  # set_context(enable_compile_cache=...); read: compile_cache()
    compile_cache_path_setting: str | None = None  # set_context(compile_cache_path=...); read: compile_cache()
    format_transform: str = "auto"  # NCHW convs run NHWC: "auto" (GPUs), "channels_last", "off" (MindSpore's disable)

    @property
    def save_graphs(self) -> int:
        """The IR-dump level: MindSpore 2.x's ``MS_DEV_SAVE_GRAPHS`` when set (it takes precedence over
        ``set_context(save_graphs=...)``, as in MindSpore, whose compiler reads the variable when it dumps), else the
        ``set_context`` value. Read when a program is compiled, so a script may set the variable after its imports,
        as MindSpore's samples do."""
        level = _env.save_graphs_level()
        return self.save_graphs_setting if level is None else level

    @save_graphs.setter
    def save_graphs(self, value: int) -> None:
        self.save_graphs_setting = value

    @property
    def save_graphs_path(self) -> str:
        """Where dumps go: ``MS_DEV_SAVE_GRAPHS_PATH`` when set, else ``set_context(save_graphs_path=...)``."""
        return _env.save_graphs_path() or self.save_graphs_path_setting

    @save_graphs_path.setter
    def save_graphs_path(self, value: str) -> None:
        self.save_graphs_path_setting = value


@dataclass
class AutoParallelContext(_Revised):
    parallel_mode: str = ParallelMode.STAND_ALONE
    search_mode: str = "recursive_programming"
    propagation_order: str = "hints_first"  # graphpar's own key (values.PROPAGATION_ORDERS)
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
    auto_pipeline: bool = False  # AUTO_PARALLEL: graphpar plan / plan_for_devices search pipeline stages
    pipeline_config: dict = field(default_factory=lambda: {"pipeline_interleave": False,
                                                           "pipeline_scheduler": "1f1b"})
    comm_fusion: dict = field(default_factory=comm_fusion_default)  # kept for the getter; fuses nothing

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


_context = Context()
_auto_parallel = AutoParallelContext()


@args_type_check("set_context", **SET_CONTEXT_TYPES)  # MindSpore's shape: __wrapped__ skips only this check
def set_context(**kwargs: Any) -> None:
    """Set MindSpore's global context: ``mode``, ``device_target``, ``device_id``, ``save_graphs``,
    ``save_graphs_path``, ``max_device_memory``, ``enable_compile_cache``, ``compile_cache_path`` (XLA's persistent
    compilation cache: ``compile_cache()``), ``disable_format_transform`` (and graphpar's ``format_transform``:
    "auto", "channels_last" or "off"). Other MindSpore settings that mean nothing on XLA are accepted with a log
    line."""
    api = "set_context"
    valid = _CONTEXT_KEYS
    for key, value in kwargs.items():
        if key in IGNORED_CONTEXT_KEYS:
            notice_once(f"context:{key}", f"set_context({key}=...) has no effect in graphpar (XLA decides this)",
                        logging.INFO)
            continue
        if key not in valid:
            raise UnknownSettingError(api, key, valid | IGNORED_CONTEXT_KEYS)
        if key == "mode":
            if value not in (GRAPH_MODE, PYNATIVE_MODE) or isinstance(value, bool):
                raise ConfigError(api, key, value, valid=["GRAPH_MODE (0)", "PYNATIVE_MODE (1)"])
            _context.mode = value
        elif key == "device_target":
            asked, value = value, ascend_stand_in() if value == "Ascend" else value  # no Ascend on XLA (said once)
            if value not in DEVICE_TARGETS:
                raise ConfigError(api, key, value, valid=DEVICE_TARGETS)
            check_platform(value)
            _context.device_target, _context.ascend = value, asked == "Ascend"
        elif key == "device_id":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(api, key, value, reason=f"device_id must be an int >= 0, got {value!r}")
            check_device_id(value)
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
            check_writable_dir(api, key, value)
            _context.save_graphs_path = value
        elif key == "max_device_memory":
            _ = None if value is None else parse_memory(value)  # checked now, read by the plan; None: no budget
            _context.max_device_memory = value
        elif key == "enable_compile_cache":
            _context.enable_compile_cache_setting = check_bool(api, key, value)
        elif key == "compile_cache_path":
            if not isinstance(value, str) or not value:
                raise ConfigError(api, key, value, reason="compile_cache_path must be a non-empty string")
            check_writable_dir(api, key, value)
            _context.compile_cache_path_setting = value
        elif key == "format_transform":
            _context.format_transform = check_format_transform(value)
        elif key == "disable_format_transform":  # MindSpore's GPU switch: True turns the transform off
            if check_bool(api, key, value):
                _context.format_transform = "off"
            elif _context.format_transform == "off":
                _context.format_transform = "auto"


def compile_cache() -> CompileCache:
    """The compile cache in force (``cache_dir.resolve``: the settings, then MindSpore's variables, then defaults)."""
    return resolve_compile_cache(_context.enable_compile_cache_setting, _context.compile_cache_path_setting)


_CONTEXT_KEYS = frozenset({"mode", "device_target", "device_id", "save_graphs", "save_graphs_path",
                           "max_device_memory", "enable_compile_cache", "compile_cache_path", "format_transform",
                           "disable_format_transform"})


def get_context(key: str) -> Any:
    if key not in _CONTEXT_KEYS:
        raise UnknownSettingError("get_context", key, _CONTEXT_KEYS)
    if key == "enable_compile_cache":
        return compile_cache().enabled
    if key == "compile_cache_path":  # the root in force (XLA's entries lie in its xla/ folder)
        return compile_cache().root
    if key == "disable_format_transform":
        return _context.format_transform == "off"
    return getattr(_context, key)


def set_auto_parallel_context(**kwargs: Any) -> None:
    """Set MindSpore's auto-parallel context. See ``docs/porting_from_mindspore.md`` for every difference."""
    api = "set_auto_parallel_context"
    valid = _PARALLEL_GETTERS | {"auto_parallel_search_mode", "strategy_ckpt_load_file", "strategy_ckpt_save_file",
                                 "optimizer_weight_shard_size"}
    for key, value in kwargs.items():
        if key == "sharding_propagation":  # MindSpore 1.x spelling, applied after the loop: True propagates
            check_bool(api, key, value)         # whatever search_mode says (MindSpore's edge cost: use_sp = either)
            continue
        if key in IGNORED_PARALLEL_KEYS:
            notice_once(f"parallel:{key}", f"set_auto_parallel_context({key}=...) has no effect in graphpar "
                        f"({IGNORED_WHY.get(key, 'XLA schedules and fuses communication itself')})", logging.INFO)
            continue
        if key not in valid:
            raise UnknownSettingError(api, key, valid | IGNORED_PARALLEL_KEYS | {"sharding_propagation"})
        if key == "parallel_mode":
            _auto_parallel.parallel_mode = check_choice(api, key, value, ParallelMode.MODE_LIST)
        elif key in ("search_mode", "auto_parallel_search_mode"):
            _auto_parallel.search_mode = check_choice(api, key, value, SEARCH_MODES)
        elif key == "propagation_order":
            _auto_parallel.propagation_order = check_choice(api, key, value, PROPAGATION_ORDERS)
        elif key in ("gradients_mean", "parameter_broadcast", "enable_parallel_optimizer"):
            setattr(_auto_parallel, key, check_bool(api, key, value))
        elif key in ("parallel_optimizer_config", "optimizer_weight_shard_size"):  # the second: MindSpore 1.x's
            value = value if key == "parallel_optimizer_config" else {"optimizer_weight_shard_size": value}
            _auto_parallel.parallel_optimizer_config = check_parallel_optimizer_config(value, _auto_parallel.parallel_optimizer_config)
        elif key == "comm_fusion":
            _auto_parallel.comm_fusion = check_comm_fusion(value, _auto_parallel.comm_fusion)
        elif key == "grad_accumulation_step":
            _auto_parallel.grad_accumulation_step = check_int_at_least(api, key, value, 1)
        elif key == "device_num":
            _auto_parallel.device_num = check_int_at_least(api, key, value, 1)
        elif key == "global_rank":
            _auto_parallel.global_rank = check_int_at_least(api, key, value, 0)
            notice_once("parallel:global_rank", "set_auto_parallel_context(global_rank=...) is kept for "
                        "get_auto_parallel_context but picks nothing: a process's ranks are its devices' places in "
                        "the job (get_rank())", logging.INFO)
        elif key == "dataset_strategy":
            _auto_parallel.dataset_strategy = check_dataset_strategy(value)
        elif key == "full_batch":
            _auto_parallel.dataset_strategy = "full_batch" if check_bool(api, key, value) else "data_parallel"
        elif key == "pipeline_stages":
            _auto_parallel.pipeline_stages = check_int_at_least(api, key, value, 1)
        elif key == "pipeline_config":
            _auto_parallel.pipeline_config = check_pipeline_config(value)
        elif key == "auto_pipeline":
            _auto_parallel.auto_pipeline = check_auto_pipeline(value)
        elif key == "strategy_ckpt_config":
            if not isinstance(value, dict) or not set(value) <= {"load_file", "save_file", "only_trainable_params"}:
                raise ConfigError(api, key, value, valid=["a dict with keys load_file, save_file, "
                                                          "only_trainable_params"])
            _auto_parallel.strategy_ckpt_config = {**_auto_parallel.strategy_ckpt_config, **value}
        elif key in ("strategy_ckpt_load_file", "strategy_ckpt_save_file"):
            _auto_parallel.strategy_ckpt_config = {**_auto_parallel.strategy_ckpt_config, key.split("_")[-2] + "_file": value}
    if kwargs.get("sharding_propagation") is True:
        _auto_parallel.search_mode = "sharding_propagation"


# global_rank's default is this process's rank: graphpar.communication (a layer above) registers its get_rank() here
_rank_source: Callable[[], int] | None = None


def register_rank_source(source: Callable[[], int]) -> None:
    """Make ``source`` (``graphpar.communication.get_rank``) the default of ``global_rank``."""
    global _rank_source
    _rank_source = source


_PARALLEL_GETTERS = {"parallel_mode", "search_mode", "propagation_order", "gradients_mean", "parameter_broadcast",
                     "device_num", "global_rank", "dataset_strategy", "full_batch", "strategy_ckpt_config",
                     "enable_parallel_optimizer", "pipeline_stages", "parallel_optimizer_config",
                     "grad_accumulation_step", "pipeline_config", "auto_pipeline", "comm_fusion"}


def get_auto_parallel_context(key: str) -> Any:
    if key == "auto_parallel_search_mode":
        key = "search_mode"
    if key not in _PARALLEL_GETTERS:
        raise UnknownSettingError("get_auto_parallel_context", key, _PARALLEL_GETTERS)
    if key == "device_num" and _auto_parallel.device_num is None:
        return jax.device_count()
    if key == "global_rank" and _auto_parallel.global_rank is None:
        if _rank_source is None:
            raise GraphparError("get_auto_parallel_context('global_rank'): no rank source is registered; "
                                "graphpar.communication registers get_rank() when it is imported (import graphpar)")
        return _rank_source()
    # a copy: changing the returned dict in place must not change a setting behind set_auto_parallel_context
    return copy.deepcopy(getattr(_auto_parallel, key))


def reset_auto_parallel_context() -> None:
    """Restore every auto-parallel setting to its default."""
    global _auto_parallel
    _auto_parallel = AutoParallelContext()


@contextlib.contextmanager
def overlaid(op_strategy: OpStrategyConfig | None = None, **kwargs: Any) -> Iterator[None]:
    """``set_auto_parallel_context(**kwargs)`` (and ``op_strategy`` as ``set_op_strategy_config``) for the body of a
    ``with`` only, every auto-parallel setting restored afterwards, also when the body raises: how
    ``AutoParallel`` applies its settings to the step it wraps and to nothing else. The settings are those
    :func:`compile_key` reads, so the programs compiled inside are keyed by them. Restored field by field (each
    assignment moves :func:`settings_revision`, so no fast path keeps a program of the overlaid settings)."""
    saved, saved_op = copy.deepcopy(_auto_parallel), current_op_strategy_config()
    try:
        set_auto_parallel_context(**kwargs)
        if op_strategy is not None:
            use_op_strategy_config(op_strategy)
        yield
    finally:
        for f in fields(AutoParallelContext):
            setattr(_auto_parallel, f.name, getattr(saved, f.name))
        use_op_strategy_config(saved_op)


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


_NOT_COMPILED = frozenset({"save_graphs_setting", "save_graphs_path_setting", "enable_compile_cache_setting",
                           "compile_cache_path_setting", "comm_fusion"})  # dumps and the cache never change a program


@functools.cache
def _compiled_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.name not in _NOT_COMPILED)


def compile_key() -> tuple:
    """Every setting a compiled program depends on, as one hashable value (read without copying: it is checked
    on every step, so it stays a few microseconds). ``save_graphs`` is not part of it: dumping never changes the
    program that runs."""
    own = tuple([getattr(_context, name) for name in _compiled_fields(type(_context))])
    return own + tuple([_frozen(getattr(_auto_parallel, name)) for name in _compiled_fields(type(_auto_parallel))]
                       ) + (current_algo(), current_op_strategy_config(), current_cost_model())


def settings() -> tuple:
    """The settings :func:`compile_key` reads, as they are (dicts not frozen): cheaper to build and to compare
    (``==`` compares dicts by value) for a per-step "has anything changed" check against a deep copy taken when a
    program was chosen. Equal settings give equal compile keys."""
    return (_fields_getter(type(_context))(_context) + _fields_getter(type(_auto_parallel))(_auto_parallel)
            + (current_algo(), current_op_strategy_config(), current_cost_model()))


@functools.cache
def _fields_getter(cls: type) -> Callable[[Any], tuple]:
    """Reads :func:`_compiled_fields` of an instance into a tuple in one C-level call (settings() runs per step)."""
    get = operator.attrgetter(*_compiled_fields(cls))
    return get if len(_compiled_fields(cls)) > 1 else lambda obj: (get(obj),)


def current_parallel() -> AutoParallelContext:
    """A copy of the auto-parallel settings as they are now (the compile stage snapshots them)."""
    return copy.deepcopy(_auto_parallel)
