"""The progress bar: on in a terminal (or GRAPHPAR_PROGRESS=1), off in logs; monitor lines print above it."""

import io
import re

import pytest
from rich.console import Console

import graphpar as ms
from graphpar import nn
from graphpar.train import LossMonitor, Model, TimeMonitor
from graphpar.train.callback import ProgressBar
from graphpar.train.callback._progress import progress_bar_wanted, with_progress_bar

from .helpers import MLP, array_dataset, regression_data


def _model():
    ms.set_context(mode=ms.GRAPH_MODE)
    net = MLP()
    return Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.01, 0.9))


def _dataset():
    x, y = regression_data(32)
    return array_dataset(x, y, batch_size=8)


def test_wanted_follows_the_environment_then_the_terminal(monkeypatch):
    monkeypatch.setenv("GRAPHPAR_PROGRESS", "1")
    assert progress_bar_wanted()
    monkeypatch.setenv("GRAPHPAR_PROGRESS", "0")
    assert not progress_bar_wanted()
    monkeypatch.delenv("GRAPHPAR_PROGRESS")
    assert not progress_bar_wanted()  # pytest's captured stdout is not a terminal


def test_with_progress_bar_adds_one_bar_in_front(monkeypatch):
    monkeypatch.setenv("GRAPHPAR_PROGRESS", "1")
    monitor = LossMonitor()
    out = with_progress_bar([monitor])
    assert isinstance(out[0], ProgressBar) and out[1] is monitor
    assert isinstance(with_progress_bar(None)[0], ProgressBar)
    mine = ProgressBar()
    assert with_progress_bar([mine, monitor]) == [mine, monitor]
    monkeypatch.setenv("GRAPHPAR_PROGRESS", "0")
    assert with_progress_bar(monitor) is monitor


def test_logs_get_only_the_plain_lines(monkeypatch, capsys):
    monkeypatch.delenv("GRAPHPAR_PROGRESS", raising=False)
    _model().train(2, _dataset(), callbacks=[LossMonitor()])
    out = capsys.readouterr().out
    assert [l.split(",")[0] for l in out.splitlines()] == [f"epoch: {e} step: {s}" for e in (1, 2) for s in range(1, 5)]


@pytest.mark.parametrize("sink", [False, True])
def test_bar_shows_progress_and_monitor_lines_print_above_it(sink):
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120, color_system=None)
    _model().train(2, _dataset(), callbacks=[ProgressBar(console), LossMonitor(), TimeMonitor()],
                   dataset_sink_mode=sink)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())  # drop the terminal control codes
    lines = [l for l in text.replace("\r", "\n").splitlines() if l.startswith("epoch: ")]
    expected = 2 if sink else 8
    assert len(lines) == expected and lines[-1].startswith(f"epoch: 2 step: {4}, loss is")
    assert "epoch time:" in text  # TimeMonitor goes through the same printer
    assert "epoch 2/2" in text and "step 4/4" in text and re.search(r"loss \d+\.\d{4} [\d.]+ img/s", text)


def test_bar_restores_the_printer_and_survives_a_failing_step(capsys):
    class Boom(LossMonitor):
        def step_end(self, run_context):
            raise RuntimeError("boom")

    buf = io.StringIO()
    with pytest.raises(RuntimeError, match="boom"):
        _model().train(1, _dataset(), callbacks=[ProgressBar(Console(file=buf, force_terminal=True)), Boom()])
    _model().train(1, _dataset(), callbacks=[LossMonitor()])  # a later run prints plainly
    assert "epoch: 1 step: 4" in capsys.readouterr().out
