"""MindSpore's cost-model context (``mindspore.parallel._cost_model_context``): ``set_cost_model_context``,
``get_cost_model_context``, ``reset_cost_model_context`` and the private ``_set/_get_multi_subgraphs``,
``_set/_get_algo_single_loop``, ``_set/_get_rp_matmul_mem_coef``, with MindSpore's keys, defaults and errors.

Every value is checked as MindSpore checks it and kept for the getters. Three weigh graphpar's plans, the terms of
MindSpore's DP objective that graphpar's ``dynamic_programming`` objective has (:attr:`CostModelSettings.
objective_weights`, read by the compile stage into ``planner.search.settings.objective_hardware``):
``costmodel_alpha`` scales computation and ``costmodel_beta`` communication, each by its ratio to MindSpore's
default (the platform's measured constants stand for those defaults), and ``costmodel_communi_bias`` is the bytes
charged per collective (graphpar's own pipeline-stage search keeps the platform's constants). The others have no
term in graphpar's one cost model (``planner.cost``; its memory bound is ``set_context(max_device_memory=...)``): a
value other than MindSpore's default says once, per key, what graphpar does instead (:data:`INSTEAD`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields, replace
from typing import Any

from graphpar._context.typecheck import args_type_check
from graphpar._logging import notice_once
from graphpar.errors import ConfigError, SettingTypeError


@dataclass(frozen=True)
class CostModelSettings:
    """MindSpore's ``CostModelContext`` values and defaults (``costmodel_context.h``; ``costmodel_beta``: the
    Ascend default, MindSpore's default target; ``dp_algo_single_loop`` False, as MindSpore's
    ``test_auto_parallel_two_matmul`` reads it after a reset)."""

    device_memory_capacity: float = 16.0 * 1024.0 ** 3
    costmodel_alpha: float = 1.0
    costmodel_beta: float = 400.0
    costmodel_gamma: float = 0.001
    costmodel_communi_threshold: float = 2048.0
    costmodel_communi_const: float = 3072.0
    costmodel_communi_bias: float = 1024.0
    run_phase: int = 0
    costmodel_allreduce_fusion_algorithm: int = 0
    costmodel_allreduce_fusion_times: int = 0
    costmodel_allreduce_fusion_tail_percent: float = 0.1
    costmodel_allreduce_fusion_tail_time: float = 0.1
    costmodel_allreduce_fusion_allreduce_inherent_time: float = 0.1
    costmodel_allreduce_fusion_allreduce_bandwidth: float = 0.1
    costmodel_allreduce_fusion_computation_time_parameter: float = 0.1
    multi_subgraphs: bool = False
    dp_algo_single_loop: bool = False
    rp_matmul_mem_coef: float = 0.1

    @property
    def objective_weights(self) -> tuple[float, float, float]:
        """(compute, communication, bytes per collective) of the dynamic_programming objective: ``costmodel_alpha``
        and ``costmodel_beta`` relative to MindSpore's defaults, ``costmodel_communi_bias`` as it is."""
        default = CostModelSettings()
        return (self.costmodel_alpha / default.costmodel_alpha, self.costmodel_beta / default.costmodel_beta,
                self.costmodel_communi_bias)


# the keys set_cost_model_context / get_cost_model_context take (MindSpore's func maps); the last three fields
# have only their private setters
PUBLIC_KEYS = tuple(f.name for f in fields(CostModelSettings))[:-3]
_TYPES = {f.name: (float if f.type == "float" else int if f.type == "int" else bool)
          for f in fields(CostModelSettings)}
_API = "set_cost_model_context"
_FUSION = ("gradient AllReduces are scheduled and combined by XLA (its collective combiners); graphpar has no "
           "allreduce fusion algorithm for this to tune")
WEIGHED = ("costmodel_alpha", "costmodel_beta", "costmodel_communi_bias")  # the keys that weigh plans
INSTEAD = {
    "device_memory_capacity": "graphpar's searches bound per-device memory by set_context(max_device_memory=...) "
                              "(the plan's predicted peak)",
    "costmodel_gamma": "graphpar prices a parameter-gradient AllReduce in full (its wire bytes), never discounted",
    "costmodel_communi_threshold": "graphpar charges every collective its wire bytes plus costmodel_communi_bias; "
                                   "no size threshold",
    "costmodel_communi_const": "graphpar charges every collective its wire bytes plus costmodel_communi_bias; no "
                               "constant for small collectives",
    "run_phase": "graphpar plans the program it compiles: forward only for predict / eval / a forward call, forward "
                 "and backward for a training step",
    "multi_subgraphs": "graphpar traces the whole step into one graph and plans it whole",
    "dp_algo_single_loop": "graphpar unrolls a Python loop when it traces and plans each iteration's ops as ops of "
                           "their own",
    "rp_matmul_mem_coef": "graphpar's recursive_programming searches its MatMuls exactly, bounding memory by "
                          "set_context(max_device_memory=...); only under MS_INTERFERED_SAPP=1, where the MatMuls take "
                          "SAPP's partition, does it weigh their cost of cutting rows, as MindSpore's",
    **{f.name: _FUSION for f in fields(CostModelSettings) if "allreduce_fusion" in f.name},
}
_POSITIVE = ("device_memory_capacity", "costmodel_alpha", "costmodel_beta")
_NON_NEGATIVE = ("costmodel_communi_threshold", "costmodel_communi_const", "costmodel_communi_bias",
                 "rp_matmul_mem_coef")
_cost_model = CostModelSettings()


def _store(api: str, key: str, value: Any) -> None:
    """Check ``value`` for ``key`` (MindSpore's types; its ranges as named errors), keep it, and say once what
    graphpar does instead when it differs from MindSpore's default."""
    global _cost_model
    kind = _TYPES[key]
    if kind is not float and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise SettingTypeError(api, key, value, reason=f"{key} must be {kind.__name__}, got {type(value).__name__}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise SettingTypeError(api, key, value, reason=f"{key} must be float, got {type(value).__name__}")
    if key in _POSITIVE and value <= 0:
        raise ConfigError(api, key, value, reason=f"{key} must be positive, got {value!r}")
    if key in _NON_NEGATIVE and value < 0:
        raise ConfigError(api, key, value, reason=f"{key} must be >= 0, got {value!r}")
    if key == "costmodel_gamma" and not 0 <= value <= 1:
        raise ConfigError(api, key, value, reason=f"costmodel_gamma must be in [0, 1], got {value!r}")
    if key == "run_phase" and value not in (0, 1):
        raise ConfigError(api, key, value, valid=[0, 1], reason=f"run_phase must be 0 (training) or 1 (inference), "
                                                                f"got {value!r}")
    if key == "costmodel_allreduce_fusion_algorithm" and value not in (0, 1, 2):
        raise ConfigError(api, key, value, valid=[0, 1, 2])
    if key in WEIGHED:
        notice_once(f"cost_model:{key}", f"{api}({key}={value!r}) weighs AUTO_PARALLEL's dynamic_programming "
                    f"objective (recursive_programming and sharding_propagation do not read it)", logging.INFO)
    elif value != getattr(CostModelSettings(), key) and key == "rp_matmul_mem_coef":
        notice_once(f"cost_model:{key}", f"{api}({key}={value!r}) is kept for get_cost_model_context; "
                    f"{INSTEAD[key]}", logging.INFO)
    elif value != getattr(CostModelSettings(), key):
        notice_once(f"cost_model:{key}", f"{api}({key}={value!r}) is kept for get_cost_model_context but weighs no "
                    f"plan: {INSTEAD[key]}", logging.INFO)
    _cost_model = replace(_cost_model, **{key: float(value) if kind is float else value})


# MindSpore's types (its @args_type_check): a float key given an int is a TypeError there, as here
@args_type_check(_API, **{k: _TYPES[k] for k in PUBLIC_KEYS})
def set_cost_model_context(**kwargs: Any) -> None:
    """MindSpore's ``set_cost_model_context``: an unknown key is a ``ValueError`` naming the valid ones."""
    for key in kwargs:
        if key not in PUBLIC_KEYS:
            raise ConfigError(_API, key, valid=PUBLIC_KEYS, reason=f"unknown key {key!r}")
    for key, value in kwargs.items():
        _store(_API, key, value)


def get_cost_model_context(attr_key: str) -> Any:
    """The value of one ``set_cost_model_context`` key (``ValueError`` for an unknown one, as MindSpore)."""
    if attr_key not in PUBLIC_KEYS:
        raise ConfigError("get_cost_model_context", attr_key, valid=PUBLIC_KEYS, reason=f"unknown key {attr_key!r}")
    return getattr(_cost_model, attr_key)


def reset_cost_model_context() -> None:
    """Every key, the private ones included, back to MindSpore's default (its ``ResetCostModel``)."""
    global _cost_model
    _cost_model = CostModelSettings()


def current_cost_model() -> CostModelSettings:
    """The cost-model settings in force."""
    return _cost_model


def _set_multi_subgraphs(multi_subgraph: bool = True) -> None:
    _store("_set_multi_subgraphs", "multi_subgraphs", multi_subgraph)


def _get_multi_subgraphs() -> bool:
    return _cost_model.multi_subgraphs


def _set_algo_single_loop(single_loop: bool = True) -> None:
    _store("_set_algo_single_loop", "dp_algo_single_loop", single_loop)


def _get_algo_single_loop() -> bool:
    return _cost_model.dp_algo_single_loop


def _set_rp_matmul_mem_coef(coef: float) -> None:
    _store("_set_rp_matmul_mem_coef", "rp_matmul_mem_coef", coef)


def _get_rp_matmul_mem_coef() -> float:
    return _cost_model.rp_matmul_mem_coef
