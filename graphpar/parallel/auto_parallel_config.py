"""``AutoParallel``'s configuration methods (MindSpore 2.6's list, its signatures and defaults), each mapped onto the
``set_auto_parallel_context`` / ``set_op_strategy_config`` setting graphpar already builds, or refused by name.

A method only checks its arguments and records the settings in an :class:`Overlay` (a value: each call makes a new
one); the wrapper applies the overlay while the wrapped step runs (``_context.overlaid``), so the settings are part
of the compile key of the programs compiled in that call and of nothing else (around a Cell, the job's settings
from the method call on: ``Model`` builds its programs outside the wrapper's call). What each method becomes:

* ``hsdp(shard_size=-1, threshold=64, optimizer_level="level1")``: ``enable_parallel_optimizer=True`` and
  ``parallel_optimizer_config``;
* ``pipeline(stages=1, output_broadcast=False, interleave=False, scheduler="1f1b")``: ``pipeline_stages`` and
  ``pipeline_config`` for a wrapped ``PipelineCell``, or around a step function for the PipelineCell it
  differentiates (a pipelined functional step, ``compile.functional.pipelined``);
* ``dataset_strategy(config)``: ``dataset_strategy``;
* ``save_param_strategy_file`` / ``load_param_strategy_file`` / ``disable_strategy_file_only_for_trainable_params``:
  ``strategy_ckpt_config``'s ``save_file`` / ``load_file`` / ``only_trainable_params``;
* ``save_operator_strategy_file`` / ``load_operator_strategy_file``: ``set_op_strategy_config("SAVE" / "LOAD")``;
* ``enable_gradients_mean()``: ``gradients_mean=True``;
* ``comm_fusion``, ``set_group_ckpt_save_file``, ``disable_gradient_fp32_sync``, ``transformer_opt``: nothing to
  do on XLA, said once;
* ``no_init_parameters_in_compile``, ``enable_fp32_communication``, ``disable_loss_repeated_mean``,
  ``print_local_norm``, ``dump_local_norm``, ``enable_device_local_norm``: refused by name
  (:class:`~graphpar.errors.JitError`), saying what to do instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from graphpar import _context
from graphpar._context import OPTIMIZER_LEVELS, OpStrategyConfig, check_pipeline_config
from graphpar._logging import notice_once
from graphpar.errors import ConfigError, JitError, SettingTypeError

_NORM = "ops.Sqrt()(ops.ReduceSum()(g * g))"  # what the local-norm refusals suggest
_MERGED = ("strategy_ckpt_config", "parallel_optimizer_config")  # dict settings a later method adds keys to


@dataclass(frozen=True)
class Overlay:
    """The settings an ``AutoParallel`` applies while its network runs: ``set_auto_parallel_context`` keywords
    (``settings``: (key, value) pairs, a dict setting as its sorted pairs, so the value hashes as a Cell's static
    data must) and the ``set_op_strategy_config`` value (None: the job's)."""

    settings: tuple[tuple[str, Any], ...] = ()
    op_strategy: OpStrategyConfig | None = None

    @property
    def context(self) -> dict[str, Any]:
        """The keywords for ``set_auto_parallel_context``."""
        return {key: dict(value) if key in _MERGED else value for key, value in self.settings}

    def merged(self, **kwargs: Any) -> "Overlay":
        out = self.context
        for key, value in kwargs.items():
            out[key] = {**out.get(key, {}), **value} if key in _MERGED else value
        return replace(self, settings=tuple((k, tuple(sorted(v.items())) if k in _MERGED else v)
                                            for k, v in out.items()))


def _path(method: str, file_path: Any) -> str:
    if not isinstance(file_path, str):
        raise SettingTypeError(f"AutoParallel.{method}", "file_path", file_path,
                               reason=f"file_path must be a str, got a {type(file_path).__name__}")
    return file_path


def _json_path(method: str, file_path: Any) -> str:
    """MindSpore's checks of an operator strategy file: an absolute path ending in ".json"."""
    path = _path(method, file_path)
    if not os.path.isabs(path) or os.path.splitext(path)[1] != ".json":
        raise ConfigError(f"AutoParallel.{method}", "file_path", path,
                          reason=f"file_path must be an absolute path ending in '.json', got {path!r}")
    return path


def _int(method: str, key: str, value: Any, ok: bool, valid: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not ok:
        raise ConfigError(f"AutoParallel.{method}", key, value, reason=f"{key} must be {valid}, got {value!r}")
    return value


def _bool(method: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SettingTypeError(f"AutoParallel.{method}", key, value, reason=f"{key} must be a bool, got {value!r}")
    return value


def _dataset_strategy(config: Any) -> Any:
    method = "AutoParallel.dataset_strategy"
    if isinstance(config, str):
        if config not in ("data_parallel", "full_batch"):
            raise ConfigError(method, "config", config, valid=["data_parallel", "full_batch"])
        return config
    if not isinstance(config, tuple):
        raise SettingTypeError(method, "config", config, reason=f"config must be a str or a tuple, got a "
                                                                f"{type(config).__name__}")
    for item in config:
        if not isinstance(item, tuple):
            raise JitError(method, f"dataset_strategy item {item!r}: only tuples of per-dimension splits are built "
                           "(a tuple of Layout is not); give one tuple of ints per input, e.g. ((8, 1), (8, 1))")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in item):
            raise ConfigError(method, "config", config, reason=f"each split must be an int > 0, got {item!r}")
    return config


class Configuration:
    """MindSpore 2.6's configuration methods of ``AutoParallel`` (mixed into it, which sets ``_overlay`` and
    ``_step_form``: whether the wrapped network is a step function)."""

    _overlay: Overlay
    _step_form: bool

    def _configure(self, method: str, overlay: Overlay) -> None:
        """Record ``overlay``. A step function runs with it in force (``AutoParallel.__call__``); the programs
        ``Model`` builds around a wrapped Cell are planned outside the wrapper's call, so for a Cell the settings
        are the job's from now on, said once."""
        self._overlay = overlay
        if self._step_form:
            return
        _context.set_auto_parallel_context(**overlay.context)
        if overlay.op_strategy is not None:
            _context.set_op_strategy_config(overlay.op_strategy.mode, overlay.op_strategy.path)
        notice_once(f"auto-parallel-cell:{method}", f"AutoParallel(<Cell>).{method}(): the programs Model builds "
                    "around the wrapped Cell are planned outside its call, so graphpar makes its settings the job's "
                    "now (set_auto_parallel_context)")

    def _said(self, method: str, what: str) -> None:
        notice_once(f"auto-parallel:{method}", f"AutoParallel.{method}(): {what}")

    # --- built: settings of the auto-parallel context ------------------------------------------------------------
    def hsdp(self, shard_size: int = -1, threshold: int = 64, optimizer_level: str = "level1") -> None:
        """Optimizer parallel (MindSpore's "HSDP"): the optimizer state, and per ``optimizer_level`` the weights
        and gradients, sharded over each parameter's data-parallel group (``shard_size`` devices of it; -1: all),
        parameters under ``threshold`` KB kept whole."""
        _int("hsdp", "shard_size", shard_size, shard_size == -1 or shard_size > 0, "-1 or an int > 0")
        _int("hsdp", "threshold", threshold, threshold >= 0, "an int >= 0 (KB)")
        if optimizer_level not in OPTIMIZER_LEVELS:
            raise ConfigError("AutoParallel.hsdp", "optimizer_level", optimizer_level, valid=OPTIMIZER_LEVELS)
        self._configure("hsdp", self._overlay.merged(enable_parallel_optimizer=True, parallel_optimizer_config={
            "optimizer_weight_shard_size": shard_size, "parallel_optimizer_threshold": threshold,
            "optimizer_level": optimizer_level}))

    def pipeline(self, stages: int = 1, output_broadcast: bool = False, interleave: bool = False,
                 scheduler: str = "1f1b") -> None:
        """``pipeline_stages`` and ``pipeline_config`` for the wrapped network's ``PipelineCell`` (``Pipeline``), or
        for the PipelineCell a wrapped step function differentiates (``compile.functional.pipelined``)."""
        if not isinstance(stages, int) or isinstance(stages, bool):
            raise SettingTypeError("AutoParallel.pipeline", "stages", stages, reason=f"stages must be an int, got "
                                                                                     f"{stages!r}")
        _int("pipeline", "stages", stages, stages > 0, "an int > 0")
        _bool("pipeline", "output_broadcast", output_broadcast)
        _bool("pipeline", "interleave", interleave)
        # the same schedules and combinations as set_auto_parallel_context(pipeline_config=...)
        config = check_pipeline_config({"pipeline_interleave": interleave, "pipeline_scheduler": scheduler},
                                       "AutoParallel.pipeline")
        if output_broadcast:
            self._said("pipeline", "output_broadcast=True: one process drives every stage and sees the last "
                       "stage's result; nothing is broadcast")
        self._configure("pipeline", self._overlay.merged(pipeline_stages=stages, pipeline_config=config))

    def dataset_strategy(self, config: Any) -> None:
        """How the step's inputs are laid out: "data_parallel" (each device its slice of the batch), "full_batch"
        (every device the whole batch) or one tuple of splits per input."""
        if config is None:
            raise ConfigError("AutoParallel.dataset_strategy", "config", None,
                              valid=["data_parallel", "full_batch", "a tuple of per-input splits"])
        self._configure("dataset_strategy", self._overlay.merged(dataset_strategy=_dataset_strategy(config)))

    def save_param_strategy_file(self, file_path: str) -> None:
        """Where the compile writes the parameters' strategy file (``strategy_ckpt_config``'s ``save_file``)."""
        self._configure("save_param_strategy_file", self._overlay.merged(
            strategy_ckpt_config={"save_file": _path("save_param_strategy_file", file_path)}))

    def load_param_strategy_file(self, file_path: str) -> None:
        """A strategy file whose parameter strategies the plan must follow (``strategy_ckpt_config``'s
        ``load_file``)."""
        self._configure("load_param_strategy_file", self._overlay.merged(
            strategy_ckpt_config={"load_file": _path("load_param_strategy_file", file_path)}))

    def disable_strategy_file_only_for_trainable_params(self) -> None:
        """Strategy files hold the non-trainable parameters too."""
        self._configure("disable_strategy_file_only_for_trainable_params",
                        self._overlay.merged(strategy_ckpt_config={"only_trainable_params": False}))

    def save_operator_strategy_file(self, file_path: str) -> None:
        """Where sharding propagation writes every operator's strategy (``set_op_strategy_config("SAVE")``; in
        another mode the planner says once that none is written, as MindSpore's applies to propagation only)."""
        path = _json_path("save_operator_strategy_file", file_path)
        self._configure("save_operator_strategy_file", replace(self._overlay, op_strategy=OpStrategyConfig("SAVE",
                                                                                                          path)))

    def load_operator_strategy_file(self, file_path: str) -> None:
        """Operator strategies sharding propagation starts from (``set_op_strategy_config("LOAD")``)."""
        path = _json_path("load_operator_strategy_file", file_path)
        self._configure("load_operator_strategy_file", replace(self._overlay, op_strategy=OpStrategyConfig("LOAD",
                                                                                                          path)))

    def enable_gradients_mean(self) -> None:
        """``gradients_mean=True``: DATA_PARALLEL's reduction and ``DistributedGradReducer``'s default divide by
        the device count (in SEMI_AUTO / AUTO graphpar's gradient is the global loss's whatever this says:
        docs/porting_from_mindspore.md)."""
        self._configure("enable_gradients_mean", self._overlay.merged(gradients_mean=True))

    # --- nothing to do on XLA: said once ------------------------------------------------------------------------
    def comm_fusion(self, config: dict | None) -> None:
        """MindSpore's fusion of AllReduce / AllGather / ReduceScatter: XLA's combiners fuse collectives."""
        if config is not None and not isinstance(config, dict):
            raise SettingTypeError("AutoParallel.comm_fusion", "config", config,
                                   reason=f"config must be a dict, got a {type(config).__name__}")
        self._said("comm_fusion", "XLA's collective combiners decide how communication is fused; the config is "
                   "not used")

    def set_group_ckpt_save_file(self, file_path: str) -> None:
        """MindSpore's file of communication groups (for Ascend's graph restore): graphpar's groups follow from the
        mesh in the strategy file."""
        _path("set_group_ckpt_save_file", file_path)
        self._said("set_group_ckpt_save_file", "graphpar has no communication-group file: a rank's groups follow "
                   "from the device mesh recorded in the parameter strategy file (save_param_strategy_file)")

    def disable_gradient_fp32_sync(self) -> None:
        """MindSpore casts float16 gradients to float32 before their AllReduce unless this is called."""
        self._said("disable_gradient_fp32_sync", "graphpar casts no gradient for its reduction: each is reduced "
                   "in the dtype the planned graph gives it, with or without this call")

    def transformer_opt(self, file_path: str | None) -> None:
        """Ascend's ``parallel_speed_up.json`` (communication/computation overlaps): XLA schedules overlaps."""
        if file_path not in (None, ""):
            _path("transformer_opt", file_path)
            self._said("transformer_opt", f"{file_path!r} is not read: its options are Ascend's scheduling of "
                       "communication; XLA's scheduler overlaps communication with computation itself")

    # --- refused by name ----------------------------------------------------------------------------------------
    def no_init_parameters_in_compile(self) -> None:
        raise JitError("AutoParallel.no_init_parameters_in_compile", "not built: Parameters made under "
                       "nn.utils.no_init_parameters() are drawn at the first compile, each device drawing only its "
                       "own shard; to start from a checkpoint instead, load it (ms.load_param_into_net) before the "
                       "first step: it replaces the deferred values without drawing them")

    def enable_fp32_communication(self) -> None:
        raise JitError("AutoParallel.enable_fp32_communication", "not built: each reduction runs in the dtype the "
                       "planned graph gives it; keep the parameters (and so their gradients) in float32")

    def disable_loss_repeated_mean(self) -> None:
        raise JitError("AutoParallel.disable_loss_repeated_mean", "not built: graphpar's gradient is that of the "
                       "global batch's loss, computed once (MindSpore's default, loss_repeated_mean=True)")

    def print_local_norm(self) -> None:
        raise JitError("AutoParallel.print_local_norm", f"not built: compute the norms in the step ({_NORM} of each "
                       "gradient) and return or print them")

    def dump_local_norm(self, file_path: str) -> None:
        raise JitError("AutoParallel.dump_local_norm", f"not built: compute the norms in the step ({_NORM} of each "
                       "gradient), return them and save them")

    def enable_device_local_norm(self) -> None:
        raise JitError("AutoParallel.enable_device_local_norm", f"not built: compute the norms in the step ({_NORM} "
                       "of each gradient) and return them")
