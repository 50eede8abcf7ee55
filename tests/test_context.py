"""The context API: MindSpore names, defaults, and one-line errors naming the culprit and the valid choices."""

import jax
import pytest

import graphpar as ms
from graphpar.errors import ConfigError, DeviceError, UnknownSettingError


def test_defaults_match_mindspore():
    assert ms.get_context("mode") == ms.GRAPH_MODE
    assert ms.get_auto_parallel_context("parallel_mode") == ms.ParallelMode.STAND_ALONE
    assert ms.get_auto_parallel_context("gradients_mean") is False
    assert ms.get_auto_parallel_context("full_batch") is False
    assert ms.get_auto_parallel_context("dataset_strategy") == "data_parallel"
    assert ms.get_auto_parallel_context("device_num") == jax.device_count() == 8


def test_set_and_reset_auto_parallel_context():
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, search_mode="sharding_propagation",
                                 gradients_mean=True, device_num=4, full_batch=True)
    assert ms.get_auto_parallel_context("parallel_mode") == "auto_parallel"
    assert ms.get_auto_parallel_context("search_mode") == "sharding_propagation"
    assert ms.get_auto_parallel_context("device_num") == 4
    assert ms.get_auto_parallel_context("dataset_strategy") == "full_batch"
    ms.reset_auto_parallel_context()
    assert ms.get_auto_parallel_context("parallel_mode") == "stand_alone"
    assert ms.get_auto_parallel_context("device_num") == 8


def test_context_module_spelling():
    from graphpar import context
    from graphpar.context import ParallelMode

    context.set_context(mode=context.PYNATIVE_MODE)
    assert context.get_context("mode") == ms.PYNATIVE_MODE
    assert ParallelMode.DATA_PARALLEL == "data_parallel"


def test_unknown_parallel_mode_names_valid_choices():
    with pytest.raises(ConfigError) as err:
        ms.set_auto_parallel_context(parallel_mode="model_parallel")
    text = str(err.value)
    assert "parallel_mode='model_parallel'" in text and "semi_auto_parallel" in text and "\n" not in text


def test_unknown_search_mode_names_valid_choices():
    with pytest.raises(ConfigError) as err:
        ms.set_auto_parallel_context(search_mode="greedy")
    assert "search_mode='greedy'" in str(err.value) and "sharding_propagation" in str(err.value)


def test_device_num_above_available():
    with pytest.raises(ConfigError):
        ms.set_auto_parallel_context(device_num=0)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", device_num=16)
    from graphpar.communication.devices import job_devices

    with pytest.raises(DeviceError) as err:
        job_devices(16)
    assert "device_num=16" in str(err.value) and "only 8" in str(err.value) and "1..8" in str(err.value)


def test_device_num_above_available_at_train_time():
    import numpy as np

    from graphpar import nn

    ms.set_auto_parallel_context(parallel_mode="data_parallel", device_num=16)
    net = nn.Dense(4, 2)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params()))
    with pytest.raises(DeviceError, match="device_num=16"):
        train(np.ones((16, 4), np.float32), np.ones((16, 2), np.float32))


def test_unknown_setting_lists_valid_names():
    with pytest.raises(UnknownSettingError) as err:
        ms.set_auto_parallel_context(paralel_mode="data_parallel")
    assert "paralel_mode" in str(err.value) and "parallel_mode" in str(err.value)
    with pytest.raises(UnknownSettingError):
        ms.set_context(mod=0)


def test_bad_values():
    with pytest.raises(ConfigError):
        ms.set_context(mode=3)
    with pytest.raises(ConfigError):
        ms.set_auto_parallel_context(gradients_mean="yes")
    with pytest.raises(ConfigError):
        ms.set_auto_parallel_context(dataset_strategy=[[8, 1]])


def test_device_target_missing_platform_says_so():
    with pytest.raises(DeviceError) as err:
        ms.set_context(device_target="GPU")
    assert "no gpu backend" in str(err.value).lower() and "'CPU'" in str(err.value)
    ms.set_context(device_target="CPU")


def test_ascend_script_runs_on_jax_default_platform(notices):
    """A MindSpore script written for Ascend runs on the platform JAX has (XLA has no Ascend backend), said once;
    get_context reports the platform it really runs on."""
    ms.set_context(device_target="Ascend")
    ms.set_context(device_target="Ascend")
    try:
        assert ms.get_context("device_target") == jax.default_backend().upper() == "CPU"
        said = [r.getMessage() for r in notices.records if "no Ascend backend" in r.getMessage()]
        assert len(said) == 1 and "device_target='CPU'" in said[0]
    finally:
        ms.set_context(device_target="CPU")


def test_ignored_mindspore_settings_are_accepted():
    ms.set_context(max_call_depth=10000, enable_graph_kernel=False)
    ms.set_auto_parallel_context(all_reduce_fusion_config=[10, 20])
    ms.set_ps_context(enable_ssl=False)


def test_comm_fusion_is_checked_kept_and_reset():
    """MindSpore's ``comm_fusion``: checked as MindSpore checks it (TypeError for a bad type), kept for the getter
    with MindSpore's defaults for the keys not given, and reset; it fuses nothing in graphpar (XLA does)."""
    default = {"openstate": True, "allreduce": {"mode": "auto", "config": None},
               "allgather": {"mode": "auto", "config": None}, "reducescatter": {"mode": "auto", "config": None}}
    assert ms.get_auto_parallel_context("comm_fusion") == default
    ms.set_auto_parallel_context(comm_fusion={"openstate": False, "allreduce": {"mode": "size", "config": 32}})
    assert ms.get_auto_parallel_context("comm_fusion") == {**default, "openstate": False,
                                                           "allreduce": {"mode": "size", "config": 32}}
    with pytest.raises(TypeError, match="size threshold .* must be an int >= 0, got '30.12'"):
        ms.set_auto_parallel_context(comm_fusion={"allreduce": {"mode": "size", "config": "30.12"}})
    with pytest.raises(TypeError, match="'openstate' must be a bool"):
        ms.set_auto_parallel_context(comm_fusion={"openstate": "True"})
    with pytest.raises(ValueError, match="'allgather' mode 'index' is not valid; valid choices: 'auto', 'size'"):
        ms.set_auto_parallel_context(comm_fusion={"allgather": {"mode": "index", "config": [1]}})
    ms.reset_auto_parallel_context()
    assert ms.get_auto_parallel_context("comm_fusion") == default
