"""``History`` (MindSpore's semantics) and ``HistoryPlot`` (the loss curve, a PNG outside notebooks)."""

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.train import History, HistoryPlot, Model
from graphpar.train.callback import Callback

from .helpers import MLP, array_dataset, regression_data


class _Losses(Callback):
    def __init__(self):
        super().__init__()
        self.per_step = []

    def step_end(self, run_context):
        self.per_step.append(float(np.mean(np.asarray(run_context.original_args().net_outputs))))


def _train(epochs, callbacks, sink=False):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = MLP()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9))
    x, y = regression_data(32)
    model.train(epochs, array_dataset(x, y, batch_size=8), callbacks=callbacks, dataset_sink_mode=sink)


def test_history_records_the_last_step_loss_of_every_epoch():
    history, losses = History(), _Losses()
    _train(3, [history, losses])
    assert history.epoch == [1, 2, 3]
    assert list(history.history) == ["net_output"]
    steps = len(losses.per_step) // 3
    assert steps == 4
    np.testing.assert_allclose(history.history["net_output"], losses.per_step[steps - 1::steps], rtol=1e-6)


def test_history_plot_writes_a_png_each_epoch(tmp_path, capsys):
    path = tmp_path / "curves" / "loss.png"
    plot, losses = HistoryPlot(path), _Losses()
    _train(2, [plot, losses])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"loss curve: {path.resolve()}" in capsys.readouterr().out
    assert [s for s, _ in plot.steps] == list(range(1, 9))
    np.testing.assert_allclose([v for _, v in plot.steps], losses.per_step, rtol=1e-6)
    assert [e for e, _ in plot.epoch_loss] == [1, 2]
    np.testing.assert_allclose(plot.epoch_loss[1][1], np.mean(losses.per_step[4:]), rtol=1e-6)
    fig = plot.figure(steps_per_epoch=4)
    lines = fig.axes[0].get_lines()
    np.testing.assert_allclose(lines[0].get_ydata(), losses.per_step, rtol=1e-6)
    assert list(lines[1].get_xdata()) == [4, 8]
    fig.canvas.draw()  # the ticks and the legend as drawn
    ticks = [t for t in fig.axes[0].get_xticks() if 1 <= t <= 8]
    assert ticks and all(float(t).is_integer() for t in ticks)  # whole steps, not 2.5
    assert fig.axes[0].get_legend() is None and len(fig.legends) == 1  # the legend sits outside the curve
    legend_box = fig.legends[0].get_window_extent()
    assert not legend_box.overlaps(fig.axes[0].get_window_extent())


def test_history_plot_in_sink_mode(tmp_path):
    plot = HistoryPlot(tmp_path / "loss.png")
    _train(2, [plot], sink=True)
    assert len(plot.steps) == 2 and len(plot.epoch_loss) == 2


def test_progress_bar_is_wanted_in_jupyter(monkeypatch):
    import importlib.util

    from graphpar.train.callback import _progress

    monkeypatch.delenv("GRAPHPAR_PROGRESS", raising=False)
    monkeypatch.setattr(_progress, "in_jupyter", lambda: True)
    assert _progress.progress_bar_wanted()  # pytest's stdout is no terminal, but a notebook is
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ipywidgets" else real(name, *a))
    assert not _progress.progress_bar_wanted()  # rich cannot draw a live bar there without ipywidgets
    monkeypatch.setattr(_progress, "in_jupyter", lambda: False)
    assert not _progress.progress_bar_wanted()
