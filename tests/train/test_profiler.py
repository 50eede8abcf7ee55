"""``Profiler`` (MindSpore's API) writes an XProf trace of the steps it surrounds, and the trace carries the Cell
and op names graphpar lowers each op under (issue 26)."""

import logging

import numpy as np
import pytest
from jax.profiler import ProfileData

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.train import Model


def _train(steps=4):
    ms.set_seed(0)
    net = nn.Dense(8, 4)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8 * steps, 8)).astype(np.float32), rng.normal(size=(8 * steps, 4)).astype(np.float32)
    Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(
        1, ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(8))


def test_a_trace_of_training_names_its_ops_by_cell(tmp_path):
    profiler = ms.Profiler(output_path=str(tmp_path / "data"))
    _train()
    traces = profiler.analyse()
    assert len(traces) == 1 and traces[0].suffixes[-2:] == [".xplane", ".pb"]
    data = ProfileData.from_file(str(traces[0]))
    modules = {dict(e.stats).get("hlo_module") for p in data.planes for line in p.lines for e in line.events}
    assert any(m and "step" in m for m in modules)  # the train step ran inside the trace
    raw = traces[0].read_bytes()  # the step's HLO travels in the trace: XProf names each op by its op_name
    assert b"Default/network-WithLossCell/_backbone-Dense/matmul#" in raw


def test_start_stop_and_their_misuse(tmp_path):
    profiler = ms.Profiler(output_path=str(tmp_path), start_profile=False)
    with pytest.raises(RuntimeError, match="not collecting"):
        profiler.stop()
    with profiler:
        with pytest.raises(RuntimeError, match="already collecting"):
            profiler.start()
        _train(1)
    assert list(tmp_path.glob("plugins/profile/*/*.xplane.pb"))


def test_settings(tmp_path, caplog):
    with pytest.raises(ValueError, match="schedule"):
        ms.Profiler(output_path=str(tmp_path), schedule=object(), start_profile=False)
    with pytest.raises(TypeError, match="unexpected argument 'output_dir'"):
        ms.Profiler(output_dir=str(tmp_path), start_profile=False)
    with caplog.at_level(logging.INFO, logger="graphpar"):
        ms.Profiler(output_path=str(tmp_path), aicore_metrics=1, start_profile=False)
    assert any("aicore_metrics is read by MindSpore's Ascend tool chain only" in r.message for r in caplog.records)


def test_profile_memory_writes_the_device_memory_profile(tmp_path):
    profiler = ms.Profiler(output_path=str(tmp_path), profile_memory=True)
    _train(1)
    profiler.stop()
    assert (tmp_path / "memory.prof").stat().st_size > 0
