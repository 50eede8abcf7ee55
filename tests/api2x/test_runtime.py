"""MindSpore 2.6's ``mindspore.runtime`` (issue 22, deliverable 4): ``set_memory(max_size=...)`` is the planner's
``max_device_memory`` budget; the pool-shape arguments are validated and reported; the memory statistics come from
the devices' allocator counters (none on CPU: MindSpore's empty dict); ``synchronize`` waits for dispatched work;
streams and events are refused by name."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import runtime
from graphpar.errors import ConfigError, RuntimeApiError, SettingTypeError
from graphpar.models.mlp import mlp_data
from graphpar.planner.search.settings import MemoryBudgetError
from graphpar.runtime.executor import affinity_plan
from graphpar.runtime.memory import pool_stats
from tests.search.helpers import mlp_train


def test_set_memory_max_size_is_the_budget_a_searched_plan_meets():
    ms.runtime.set_memory(max_size="0.0001GB")
    assert ms.get_context("max_device_memory") == "0.0001GB"
    x, y = mlp_data(64, 256)
    with pytest.raises(MemoryBudgetError, match="0.0001GB"):
        mlp_train(None, 2, 256, search_mode="dynamic_programming").program.plan_graph([x, y])
    # MindSpore's default max_size "1024GB" is the whole device: no budget, and the same search plans
    runtime.set_memory()
    assert ms.get_context("max_device_memory") is None
    assert mlp_train(None, 2, 256, search_mode="dynamic_programming").program.plan_graph([x, y]).plan is not None


@pytest.mark.parametrize("kwargs, error, words", [
    ({"max_size": "512MB"}, ConfigError, "set_memory(): max_size must be a positive size in the format 'xxGB'"),
    ({"init_size": "0GB"}, ConfigError, "init_size must be a positive size"),
    ({"increase_size": 2}, SettingTypeError, "increase_size must be a str such as '2GB', got 2"),
    ({"optimize_level": "O2"}, ConfigError, "valid choices: 'O0', 'O1'"),
    ({"huge_page_reserve_size": "-1GB"}, ConfigError, "huge_page_reserve_size must be a size >= 0"),
])
def test_set_memory_validates_as_mindspore(kwargs, error, words):
    with pytest.raises(error) as err:
        runtime.set_memory(**kwargs)
    assert words in str(err.value)
    assert ms.get_context("max_device_memory") is None  # nothing set by a refused call


def test_set_memory_pool_shape_is_reported_once(notices):
    runtime.set_memory("10GB", "2GB", "60GB", "O1", "0GB")  # MindSpore's documented example
    assert ms.get_context("max_device_memory") == "60GB"
    text = notices.text
    assert "set_memory(init_size='10GB') has no effect" in text and "XLA_PYTHON_CLIENT_MEM_FRACTION" in text
    assert "increase_size" not in text  # the default is not reported
    assert "optimize_level='O1'" in text
    runtime.set_memory(init_size="10GB")
    assert notices.text.count("init_size='10GB'") == 1


def test_memory_stats_on_cpu_is_mindspores_empty_pool():
    x = ms.Tensor(np.ones((256, 256), np.float32)) * 2
    runtime.synchronize()
    assert runtime.memory_stats() == {}  # XLA's CPU client keeps no counters; MindSpore's CPU backend alike
    assert runtime.memory_allocated() == runtime.max_memory_allocated() == 0
    assert runtime.memory_reserved() == runtime.max_memory_reserved() == 0
    assert "keeps no statistics" in runtime.memory_summary()
    runtime.reset_peak_memory_stats()  # nothing tracked, nothing to reset
    assert float(x[0, 0]) == 2.0


def test_memory_stats_from_gpu_allocator_counters():
    """The figures of a platform that keeps counters (GPU's BFC allocator keys), largest over the devices."""
    gpu = [{"bytes_in_use": 1024, "peak_bytes_in_use": 1536, "pool_bytes": 1 << 30, "peak_pool_bytes": 1 << 30,
            "bytes_limit": 60 << 30},
           {"bytes_in_use": 2048, "peak_bytes_in_use": 4096, "pool_bytes": 1 << 30, "peak_pool_bytes": 2 << 30}]
    stats = pool_stats(gpu)
    assert stats == {"total_reserved_memory": 1 << 30, "total_allocated_memory": 2048,
                     "total_idle_memory": (1 << 30) - 1024, "total_eager_free_memory": 0,
                     "max_reserved_memory": 2 << 30, "max_allocated_memory": 4096}
    assert pool_stats([None, None]) == {}


def test_synchronize_waits_for_dispatched_work():
    seen = []
    a = ms.Tensor(np.ones((512, 512), np.float32))
    b = a @ a
    jax.jit(lambda v: jax.debug.callback(seen.append, v.sum(), ordered=True))(jnp.ones(4))
    runtime.synchronize()
    assert all(array.is_ready() for array in jax.live_arrays() if not array.is_deleted())
    assert [float(v) for v in seen] == [4.0]  # the ordered host callback has run
    np.testing.assert_allclose(b.asnumpy()[0, :3], [512.0] * 3)


@pytest.mark.parametrize("call, name", [
    (lambda: runtime.Stream(), "Stream"), (lambda: runtime.Event(), "Event"),
    (lambda: runtime.StreamCtx(None), "StreamCtx"), (runtime.current_stream, "current_stream"),
    (runtime.default_stream, "default_stream"), (runtime.communication_stream, "communication_stream"),
    (lambda: runtime.set_cur_stream(None), "set_cur_stream"),
])
def test_streams_and_events_are_refused_by_name(call, name):
    with pytest.raises(RuntimeApiError, match=f"mindspore.runtime.{name}: ") as err:
        call()
    assert "XLA assigns" in str(err.value) and "synchronize()" in str(err.value)


def test_thread_knobs_validated_and_reported(notices):
    runtime.dispatch_threads_num(5)
    runtime.set_kernel_launch_group(thread_num=2, kernel_group_num=8)
    runtime.launch_blocking()
    assert "dispatch_threads_num(5) has no effect" in notices.text
    assert "set_kernel_launch_group(...) has no effect" in notices.text
    assert "raised where its results are read" in notices.text
    with pytest.raises(ConfigError, match="num_threads must be an int >= 1"):
        runtime.dispatch_threads_num(0)
    with pytest.raises(SettingTypeError, match="kernel_group_num must be an int"):
        runtime.set_kernel_launch_group(2, "8")


def test_cpu_affinity_plan():
    assert affinity_plan({"device0": ["0-1", "6-6"], "device1": ["2-3"]}, 0, 2, list(range(8))) == [0, 1, 6]
    assert affinity_plan(None, 1, 2, list(range(8))) == [4, 5, 6, 7]  # automatic: equal slices per device
    with pytest.raises(ConfigError, match="no entry 'device1'"):
        affinity_plan({"device0": ["0-1"]}, 1, 2, list(range(8)))
    with pytest.raises(ConfigError, match="not a range 'cpuidX-cpuidY'"):
        affinity_plan({"device0": ["3-1"]}, 0, 1, list(range(8)))
    with pytest.raises(ConfigError, match="not available to this process"):
        affinity_plan({"device0": ["0-999"]}, 0, 1, list(range(8)))


def test_set_cpu_affinity_binds_the_process():
    before = os.sched_getaffinity(0)
    first = min(before)
    try:
        runtime.set_cpu_affinity(True, {"device0": [f"{first}-{first}"]})
        assert os.sched_getaffinity(0) == {first}
    finally:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), before)
            except ProcessLookupError:
                pass
    runtime.set_cpu_affinity(False)  # MindSpore's off switch: nothing bound
    assert os.sched_getaffinity(0) == before
    with pytest.raises(SettingTypeError, match="enable_affinity must be a bool"):
        runtime.set_cpu_affinity("yes")
