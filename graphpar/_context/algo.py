"""``set_algo_parameters`` / ``get_algo_parameters`` / ``reset_algo_parameters`` and ``set_op_strategy_config``:
MindSpore's settings of the AUTO_PARALLEL strategy search (its ``CostModelContext``), with its names and defaults.

Each key is read by the planner through the ``PlanRequest`` (``planner.passes.context``); where and how:

* ``fully_use_devices`` (default False, as MindSpore 2.4+): True keeps only the candidate strategies that use every
  device (or none: all ones) in sharding propagation and the defaults, and refuses a ``shard()`` strategy of an
  AUTO_PARALLEL network (sharding_propagation, dynamic_programming) that uses some but not all devices, as
  MindSpore's ``CheckStrategyUsedDevices`` does. The searches always choose among the candidates that use the most
  devices (their candidate space), whatever this says.
* ``elementwise_op_strategy_follow`` (False): True makes an elementwise op take the strategy of the op that
  consumes its output, whenever one of its candidates produces that layout, after sharding propagation or the search
  chose (``planner.passes.elementwise_follow``).
* ``enable_algo_approxi`` (False) / ``algo_approxi_epsilon`` (0.1): the search keeps, per op, the ``ceil(1 /
  epsilon)`` candidates of least own cost (communication, then computation), as MindSpore's dynamic programming
  approximation keeps at most ``1 / epsilon``.
* ``tensor_slice_align_enable`` (False) / ``tensor_slice_align_size`` (16, in [1, 1024]): True drops the MatMul /
  BatchMatMul candidates whose per-device slice of an input's last dimension is not a multiple of the size.

``set_op_strategy_config(mode="SAVE" | "LOAD", path)``: under AUTO_PARALLEL with sharding propagation, the plan's
op strategies are written to / read from ``path`` (graphpar's strategy file, ``planner.strategy_file``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from typing import Any

from graphpar.errors import ConfigError, SettingTypeError


@dataclass(frozen=True)
class AlgoParameters:
    """The values of every ``set_algo_parameters`` key (MindSpore's defaults)."""

    fully_use_devices: bool = False
    elementwise_op_strategy_follow: bool = False
    enable_algo_approxi: bool = False
    algo_approxi_epsilon: float = 0.1
    tensor_slice_align_enable: bool = False
    tensor_slice_align_size: int = 16

    @property
    def approximation_size(self) -> int | None:
        """How many candidates per op the approximation keeps, or None when it is off."""
        return math.ceil(1.0 / self.algo_approxi_epsilon) if self.enable_algo_approxi else None


@dataclass(frozen=True)
class OpStrategyConfig:
    """``set_op_strategy_config``: ``mode`` "SAVE" or "LOAD" and the JSON file's absolute ``path`` ("" unset)."""

    mode: str = "SAVE"
    path: str = ""


_KEYS = tuple(f.name for f in fields(AlgoParameters))
_API = "set_algo_parameters"
_algo = AlgoParameters()
_op_strategy = OpStrategyConfig()


def _checked(key: str, value: Any) -> Any:
    kind = type(getattr(AlgoParameters(), key))
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingTypeError(_API, key, value, reason=f"{key} must be a float, got {type(value).__name__}")
        if not 0.0 < value <= 1.0:
            raise ConfigError(_API, key, value, reason=f"{key} must be in (0, 1], got {value!r}")
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SettingTypeError(_API, key, value, reason=f"{key} must be a {kind.__name__}, got "
                                                        f"{type(value).__name__}")
    if key == "tensor_slice_align_size" and not 1 <= value <= 1024:
        raise ConfigError(_API, key, value, reason=f"tensor_slice_align_size must be in [1, 1024], got {value}")
    return value


def set_algo_parameters(**kwargs: Any) -> None:
    """MindSpore's ``set_algo_parameters``: an unknown key is a ``ValueError`` naming the valid ones, a value of
    the wrong type a ``TypeError``; the settings take effect on the next compile."""
    global _algo
    for key in kwargs:
        if key not in _KEYS:
            raise ConfigError(_API, key, valid=_KEYS, reason=f"unknown key {key!r}")
    _algo = replace(_algo, **{k: _checked(k, v) for k, v in kwargs.items()})


def get_algo_parameters(attr_key: str) -> Any:
    """The value of one ``set_algo_parameters`` key."""
    if attr_key not in _KEYS:
        raise ConfigError("get_algo_parameters", attr_key, valid=_KEYS, reason=f"unknown key {attr_key!r}")
    return getattr(_algo, attr_key)


def reset_algo_parameters() -> None:
    """Every key back to MindSpore's default."""
    global _algo
    _algo = AlgoParameters()


def current_algo() -> AlgoParameters:
    """The algo parameters in force (read when a plan is requested)."""
    return _algo


def set_op_strategy_config(mode: str = "SAVE", path: str = "") -> None:
    """MindSpore's ``set_op_strategy_config``: ``KeyError`` for a mode other than "SAVE"/"LOAD", a path not
    ending in ".json" or not absolute (MindSpore's errors)."""
    global _op_strategy
    if mode not in ("SAVE", "LOAD"):
        raise KeyError(f"set_op_strategy_config(mode={mode!r}): mode must be 'SAVE' or 'LOAD'")
    if not isinstance(path, str) or not path.endswith(".json"):
        raise KeyError(f"set_op_strategy_config(path={path!r}): the path must end in '.json'")
    if not os.path.isabs(path):
        raise KeyError(f"set_op_strategy_config(path={path!r}): the path must be absolute, e.g. "
                       f"{os.path.abspath(path)!r}")
    _op_strategy = OpStrategyConfig(mode, path)


def current_op_strategy_config() -> OpStrategyConfig:
    return _op_strategy


def use_op_strategy_config(config: OpStrategyConfig) -> None:
    """Put ``config`` (a checked value, e.g. one read by :func:`current_op_strategy_config` earlier) in force: how a
    settings overlay (``state.overlaid``) restores what was there."""
    global _op_strategy
    _op_strategy = config


def reset_op_strategy_config() -> None:
    """No op strategy file (what a fresh process has)."""
    global _op_strategy
    _op_strategy = OpStrategyConfig()
