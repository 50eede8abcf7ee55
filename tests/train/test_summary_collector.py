"""``SummaryCollector`` (MindSpore's summary callback) writes TensorBoard event files that TensorBoard's own reader
opens: the loss of every collected step, the learning rate, throughput, parameter histograms, eval metrics; the
MindInsight-only settings are said or refused by name (issue 26)."""

import logging

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.train import Accuracy, LossMonitor, Model


class _Losses(ms.Callback):
    def __init__(self):
        self.losses = []

    def step_end(self, run_context):
        self.losses.append(float(np.asarray(run_context.original_args().net_outputs)))


def _data(n=32, batch=8):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    return ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(batch)


def _model():
    ms.set_seed(0)
    net = nn.Dense(4, 2)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, Model(net, loss, nn.Momentum(net.trainable_params(), 0.1, 0.9), metrics={"acc": Accuracy()})


def _read(folder):
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    return events


def test_the_loss_of_every_step_reads_back_with_tensorboards_reader(tmp_path):
    net, model = _model()
    losses = _Losses()
    collector = ms.SummaryCollector(str(tmp_path / "summary"), collect_freq=1,
                                    collect_specified_data={"histogram_regular": "weight"})
    model.train(2, _data(), callbacks=[collector, losses])
    model.eval(_data(), callbacks=[collector])
    events = _read(tmp_path / "summary")
    loss = events.Scalars("loss")
    assert [e.step for e in loss] == list(range(1, 9))  # 4 steps an epoch, 2 epochs
    np.testing.assert_allclose([e.value for e in loss], losses.losses, rtol=1e-6)
    assert [round(e.value, 6) for e in events.Scalars("learning_rate")] == [0.1] * 8
    assert len(events.Scalars("throughput/steps_per_second")) == 7 and min(
        e.value for e in events.Scalars("throughput/steps_per_second")) > 0
    weights = events.Histograms("weight/histogram")
    assert len(weights) == 8 and weights[-1].histogram_value.num == 8  # Dense(4, 2)'s weight
    assert "bias/histogram" not in events.Tags()["histograms"]
    assert 0.0 <= events.Scalars("eval/acc")[0].value <= 1.0


def test_collect_freq_collects_the_first_step_and_every_freq_th(tmp_path):
    _, model = _model()
    model.train(2, _data(), callbacks=[ms.SummaryCollector(str(tmp_path), collect_freq=3)])
    assert [e.step for e in _read(tmp_path).Scalars("loss")] == [1, 3, 6]


def test_max_file_size_begins_a_new_file(tmp_path):
    _, model = _model()
    model.train(2, _data(), callbacks=[ms.SummaryCollector(str(tmp_path), collect_freq=1, max_file_size=200)])
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) > 1
    assert [e.step for e in _read(tmp_path).Scalars("loss")] == list(range(1, 9))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"collect_freq": 0}, ValueError, "collect_freq must be > 0"),
    ({"collect_freq": 1.5}, TypeError, "collect_freq must be an int"),
    ({"collect_specified_data": {"collect_metrics": True}}, ValueError, "no key 'collect_metrics'; valid keys"),
    ({"collect_specified_data": {"collect_landscape": {"landscape_size": 40}}}, ValueError, "collect_landscape"),
    ({"export_options": {"tensor_format": "npy"}}, ValueError, "export_options"),
])
def test_bad_or_unsupported_settings_are_refused_by_name(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        ms.SummaryCollector(str(tmp_path), **kwargs)


def test_mindinsight_only_data_asked_for_is_said_once(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="graphpar"):
        ms.SummaryCollector(str(tmp_path), collect_specified_data={"collect_graph": True})
    assert any("collect_graph=True" in r.message and "IR dumps" in r.message for r in caplog.records)


def test_loss_monitor_and_the_collector_agree(tmp_path, capsys):
    _, model = _model()
    model.train(1, _data(), callbacks=[LossMonitor(1), ms.SummaryCollector(str(tmp_path), collect_freq=1)])
    printed = [float(line.rsplit(" ", 1)[1]) for line in capsys.readouterr().out.splitlines() if "loss is" in line]
    np.testing.assert_allclose([e.value for e in _read(tmp_path).Scalars("loss")], printed, rtol=1e-6)
