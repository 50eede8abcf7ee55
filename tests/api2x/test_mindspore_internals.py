"""MindSpore internals its parallel tests call (issue 23): ``set_context.__wrapped__``,
``mindspore.parallel._cost_model_context`` and ``mindspore.parallel._auto_parallel_context.auto_parallel_context()``,
each with MindSpore's names, defaults and error types, and what graphpar does instead said once."""

import logging
import math

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, context, nn, ops
from graphpar.errors import ConfigError, SettingTypeError
from graphpar.parallel import _cost_model_context as cost_model_context
from graphpar.parallel import strategies
from graphpar.parallel._auto_parallel_context import NoSuchSettingError, auto_parallel_context
from graphpar.parallel._cost_model_context import (
    _get_algo_single_loop, _get_rp_matmul_mem_coef, _set_algo_single_loop, _set_multi_subgraphs,
    _set_rp_matmul_mem_coef)


@pytest.fixture(autouse=True)
def fresh():
    cost_model_context.reset_cost_model_context()
    context.reset_auto_parallel_context()
    yield
    cost_model_context.reset_cost_model_context()
    context.reset_auto_parallel_context()
    context.reset_context()


# --- set_context.__wrapped__ -------------------------------------------------------------------------------------
def test_set_context_type_checks_in_a_wrapper_as_mindspores_args_type_check():
    with pytest.raises(TypeError, match="device_id must be int, got str"):
        context.set_context(device_id="0")
    with pytest.raises(SettingTypeError, match="mode must be int"):
        ms.set_context(mode="graph")
    # __wrapped__ is set_context without the type check; it still sets (and checks the value)
    context.set_context.__wrapped__(device_id=0)
    assert context.get_context("device_id") == 0
    with pytest.raises(ConfigError, match="device_id must be an int >= 0"):
        context.set_context.__wrapped__(device_id=-1)
    assert context.set_context.__name__ == "set_context" and "Set MindSpore" in context.set_context.__doc__


# --- _cost_model_context -----------------------------------------------------------------------------------------
def test_cost_model_context_keeps_mindspores_keys_and_defaults():
    cost_model_context.set_cost_model_context(device_memory_capacity=32.0 * 1024.0 ** 3, costmodel_beta=60.0,
                                              costmodel_gamma=0.1, costmodel_communi_bias=1111.0)
    assert math.isclose(cost_model_context.get_cost_model_context("device_memory_capacity"), 32.0 * 1024 ** 3)
    assert cost_model_context.get_cost_model_context("costmodel_beta") == 60.0
    assert cost_model_context.get_cost_model_context("costmodel_communi_bias") == 1111.0
    cost_model_context.reset_cost_model_context()
    defaults = {"device_memory_capacity": 16.0 * 1024 ** 3, "costmodel_alpha": 1.0, "costmodel_beta": 400.0,
                "costmodel_gamma": 0.001, "costmodel_communi_threshold": 2048.0, "costmodel_communi_const": 3072.0,
                "costmodel_communi_bias": 1024.0, "run_phase": 0}
    for key, value in defaults.items():
        assert cost_model_context.get_cost_model_context(key) == value, key


def test_cost_model_context_refuses_as_mindspore_does():
    with pytest.raises(TypeError, match="costmodel_beta must be float, got int"):  # args_type_check: no int
        cost_model_context.set_cost_model_context(costmodel_beta=400)
    with pytest.raises(ValueError, match="unknown key 'costmodel_delta'.*'costmodel_alpha'"):
        cost_model_context.set_cost_model_context(costmodel_delta=1.0)
    with pytest.raises(ValueError, match="unknown key 'multi_subgraphs'"):  # only _set_multi_subgraphs sets it
        cost_model_context.get_cost_model_context("multi_subgraphs")
    with pytest.raises(ValueError, match=r"run_phase must be 0 \(training\) or 1 \(inference\)"):
        cost_model_context.set_cost_model_context(run_phase=2)
    with pytest.raises(TypeError, match="run_phase must be int"):
        cost_model_context.set_cost_model_context(run_phase=True)
    with pytest.raises(ValueError, match="costmodel_alpha must be positive"):
        cost_model_context.set_cost_model_context(costmodel_alpha=-1.0)
    with pytest.raises(TypeError, match="dp_algo_single_loop must be bool"):
        _set_algo_single_loop(1)
    assert cost_model_context.get_cost_model_context("costmodel_beta") == 400.0  # nothing kept from a refusal


def test_private_setters_and_what_graphpar_does_instead_said_once(caplog):
    assert _get_algo_single_loop() is False and math.isclose(_get_rp_matmul_mem_coef(), 0.1)
    with caplog.at_level(logging.INFO, logger="graphpar"):
        _set_rp_matmul_mem_coef(16)
        _set_rp_matmul_mem_coef(32)
        _set_algo_single_loop(True)
        _set_multi_subgraphs()
    assert _get_rp_matmul_mem_coef() == 32.0 and _get_algo_single_loop() is True
    said = [r.getMessage() for r in caplog.records]
    assert sum("rp_matmul_mem_coef" in m for m in said) == 1  # once per key, not per call
    # it weighs SAPP's MatMul partition, which recursive_programming makes only under MS_INTERFERED_SAPP=1
    assert any("rp_matmul_mem_coef=16" in m and "only under MS_INTERFERED_SAPP=1" in m for m in said)
    assert any("dp_algo_single_loop=True" in m and "unrolls a Python loop" in m for m in said)
    assert any("multi_subgraphs=True" in m for m in said)
    cost_model_context.reset_cost_model_context()
    assert _get_algo_single_loop() is False and math.isclose(_get_rp_matmul_mem_coef(), 0.1)


def test_costmodel_alpha_beta_and_bias_weigh_the_dynamic_programming_objective(caplog):
    from graphpar.planner.search.costs import HARDWARE
    from graphpar.planner.search.settings import objective_hardware

    hw = HARDWARE["cpu"]
    default = objective_hardware("dynamic_programming", hw, ms._context.current_cost_model().objective_weights)
    assert default == objective_hardware("dynamic_programming", hw)  # MindSpore's defaults: graphpar's objective
    with caplog.at_level(logging.INFO, logger="graphpar"):
        cost_model_context.set_cost_model_context(costmodel_alpha=2.0, costmodel_beta=100.0,
                                                  costmodel_communi_bias=0.0)
    # said once per key and process: costmodel_alpha is set first here
    assert any("costmodel_alpha=2.0) weighs AUTO_PARALLEL's dynamic_programming" in r.getMessage()
               for r in caplog.records)
    weighed = objective_hardware("dynamic_programming", hw, ms._context.current_cost_model().objective_weights)
    assert weighed.gamma == 2.0 * default.gamma  # computation x costmodel_alpha / 1.0
    assert weighed.beta == default.beta / 4  # communication x costmodel_beta / 400.0
    assert weighed.alpha == 0.0  # no bias per collective
    # recursive_programming does not read them, as MindSpore's recursive search does not
    assert objective_hardware("recursive_programming", hw, (2.0, 0.25, 0.0)) == \
        objective_hardware("recursive_programming", hw)


class _TwoMatMul(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w1 = ms.Parameter(Tensor(np.ones((256, 1024), np.float32)), name="w1")
        self.w2 = ms.Parameter(Tensor(np.ones((1024, 256), np.float32)), name="w2")
        self.matmul1, self.matmul2, self.relu = ops.MatMul(), ops.MatMul(), ops.ReLU()

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul1(x, self.w1)), self.w2)


def test_costmodel_communi_bias_changes_what_dynamic_programming_chooses():
    """Charging every collective a huge bias makes the search take the plan with the fewest collectives: data
    parallel (the forward pass needs none); at MindSpore's default the two MatMuls split their weights."""
    context.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="dynamic_programming", device_num=8)
    x = Tensor(np.ones((1024, 256), np.float32))
    default = strategies(_TwoMatMul(), x)
    cost_model_context.set_cost_model_context(costmodel_communi_bias=1e9)
    biased = strategies(_TwoMatMul(), x)
    assert biased == {"Default/MatMul-op1": [[8, 1], [1, 1]], "Default/ReLU-op0": [[8, 1]],
                      "Default/MatMul-op0": [[8, 1], [1, 1]]}  # numbered per kind, the output's MatMul first
    assert default != biased and default["Default/MatMul-op1"][1] != [1, 1]  # the default splits a weight


def test_a_cost_model_setting_that_weighs_plans_is_part_of_the_compile_key():
    before = ms._context.compile_key()
    cost_model_context.set_cost_model_context(costmodel_beta=60.0)
    assert ms._context.compile_key() != before
    cost_model_context.reset_cost_model_context()
    assert ms._context.compile_key() == before


# --- auto_parallel_context() --------------------------------------------------------------------------------------
def test_auto_parallel_context_is_a_view_over_set_auto_parallel_context():
    apc = auto_parallel_context()
    assert apc is auto_parallel_context()  # MindSpore's singleton
    assert apc.get_device_num_is_set() is False
    apc.set_device_num(4)
    apc.set_gradients_mean(True)
    assert context.get_auto_parallel_context("device_num") == 4 and apc.get_device_num() == 4
    assert apc.get_device_num_is_set() and context.get_auto_parallel_context("gradients_mean") is True
    context.set_auto_parallel_context(pipeline_stages=2, pipeline_config={"pipeline_interleave": True,
                                                                          "pipeline_scheduler": "1f1b"})
    assert apc.get_pipeline_stages() == 2 and apc.get_pipeline_interleave() is True
    assert apc.get_pipeline_scheduler() == "1f1b"
    apc.reset()
    assert apc.get_device_num_is_set() is False and apc.get_gradients_mean() is False


def test_auto_parallel_context_comm_fusion_thresholds_and_switches():
    apc = auto_parallel_context()
    assert apc.allgather_fusion_threshold_mb() == 64 and apc.get_enable_all_reduce_fusion() is True
    context.set_auto_parallel_context(comm_fusion={"allgather": {"mode": "size", "config": 8},
                                                   "reducescatter": {"mode": "auto", "config": None}})
    assert apc.allgather_fusion_threshold_mb() == 8 and apc.reducescatter_fusion_threshold_mb() == 64
    apc.set_enable_all_reduce_fusion(enable_all_reduce_fusion=False)
    assert context.get_auto_parallel_context("comm_fusion")["openstate"] is False
    assert not (apc.get_enable_all_gather_fusion() or apc.get_enable_reduce_scatter_fusion())
    with pytest.raises(TypeError, match="enable_all_reduce_fusion must be bool"):
        apc.set_enable_all_reduce_fusion(enable_all_reduce_fusion="fusion")


def test_auto_parallel_context_refuses_settings_graphpar_keeps_no_value_for():
    apc = auto_parallel_context()
    with pytest.raises(NoSuchSettingError, match="keeps no 'force_fp32_communication' setting"):
        apc.get_force_fp32_communication()
    with pytest.raises(NoSuchSettingError, match="gradient_fp32_sync"):
        apc.set_gradient_fp32_sync(False)
    with pytest.raises(NoSuchSettingError, match="optimizer_weight_shard_aggregated_save"):
        apc.get_optimizer_weight_shard_aggregated_save()
    context.set_auto_parallel_context(parameter_broadcast=False)  # MindSpore: "is set" is True now, whatever value
    with pytest.raises(NoSuchSettingError, match="keeps parameter_broadcast's value"):
        apc.get_parameter_broadcast_is_set()
