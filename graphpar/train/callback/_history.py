"""``History`` (MindSpore's ``mindspore.train.History``) and ``HistoryPlot``: the loss curve of a training run.

``History`` records, at the end of every training epoch, the network output of the epoch's last step (the loss:
the mean of a tensor, the first element of a tuple, as MindSpore does) and the metrics in ``cb_params["metrics"]``
when an evaluation put them there; ``history.epoch`` lists the recorded epochs and ``history.history`` maps
``"net_output"`` and each metric name to its per-epoch values.

``HistoryPlot`` draws the curve at the end of each epoch: every step's loss (read back once per epoch, so training
is not slowed by a device sync per step), each epoch's mean, and the metrics. In a Jupyter notebook the picture is
shown inline and redrawn in place; elsewhere it is written as a PNG file whose path is printed once.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from graphpar.train.callback._callback import Callback, RunContext, loss_value
from graphpar.train.callback._progress import in_jupyter


class History(Callback):
    """``History()``: per-epoch network outputs (``history.history["net_output"]``) and metrics."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch: list[int] = []
        self.history: dict[str, list[float]] = {}

    def on_train_begin(self, run_context: RunContext) -> None:
        self.epoch = []

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        cb = run_context.original_args()
        self.epoch.append(int(cb.get("cur_epoch_num", len(self.epoch) + 1)))
        record = {"net_output": loss_value(cb.get("net_outputs"))}
        record.update(cb.get("metrics") or {})
        for key, value in record.items():
            if value is not None:
                self.history.setdefault(key, []).append(float(value))


class HistoryPlot(Callback):
    """``HistoryPlot(path="loss_curve.png", title=None)``: the loss (and metrics) curve, redrawn every epoch.

    In Jupyter the figure is displayed inline (updated in place); otherwise it is written to ``path`` (PNG).
    ``steps`` (per-step losses), ``epoch_loss`` (per-epoch means) and ``metrics`` hold the recorded values.
    """

    def __init__(self, path: str | Path = "loss_curve.png", title: str | None = None):
        super().__init__()
        try:
            import matplotlib  # noqa: F401
        except ModuleNotFoundError:
            raise ModuleNotFoundError("HistoryPlot draws with matplotlib, which is not installed: "
                                      "pip install 'graphpar[notebook]' (or matplotlib)") from None
        self.path = Path(path)
        self.title = title
        self.steps: list[tuple[int, float]] = []
        self.epoch_loss: list[tuple[int, float]] = []
        self.metrics: dict[str, list[tuple[int, float]]] = {}
        self._pending: list[tuple[int, Any]] = []
        self._handle: Any = None
        self._announced = False

    # --- recording ---------------------------------------------------------------------------------------------
    def on_train_begin(self, run_context: RunContext) -> None:
        self.steps, self.epoch_loss, self.metrics, self._pending = [], [], {}, []
        self._handle, self._announced = None, False

    def on_train_step_end(self, run_context: RunContext) -> None:
        cb = run_context.original_args()
        self._pending.append((int(cb.get("cur_step_num", 0)), cb.get("net_outputs")))  # read back at epoch end

    def on_train_epoch_end(self, run_context: RunContext) -> None:
        cb = run_context.original_args()
        epoch_steps = [(step, loss_value(out)) for step, out in self._pending]
        self._pending = []
        values = [(s, float(v)) for s, v in epoch_steps if v is not None]
        self.steps += values
        epoch = int(cb.get("cur_epoch_num", len(self.epoch_loss) + 1))
        if values:
            self.epoch_loss.append((epoch, float(np.mean([v for _, v in values]))))
        for name, value in (cb.get("metrics") or {}).items():
            self.metrics.setdefault(name, []).append((epoch, float(value)))
        self._show(cb, self.render_png(steps_per_epoch=int(cb.get("batch_num") or 1)))

    # --- drawing -----------------------------------------------------------------------------------------------
    def figure(self, steps_per_epoch: int = 1) -> Any:
        """The curve as a ``matplotlib.figure.Figure`` (no pyplot state: safe in scripts and notebooks)."""
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        # constrained layout with the legend outside the axes: a legend inside covered the curve's start
        fig = Figure(figsize=(7, 3.4), dpi=100, layout="constrained")
        ax = fig.add_subplot(1, 1, 1)
        if self.steps:
            ax.plot([s for s, _ in self.steps], [v for _, v in self.steps], color="#adb5bd", lw=1, label="step loss")
        if self.epoch_loss:
            ax.plot([e * steps_per_epoch for e, _ in self.epoch_loss], [v for _, v in self.epoch_loss], "o-",
                    color="#1c7ed6", label="epoch mean loss")
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if self.metrics:
            other = ax.twinx()
            for name, points in self.metrics.items():
                other.plot([e * steps_per_epoch for e, _ in points], [v for _, v in points], "s--", label=name)
            other.set_ylabel("metrics")
            more = other.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncols=len(handles), frameon=False)
        epochs = self.epoch_loss[-1][0] if self.epoch_loss else 0
        ax.set_title(self.title or f"training loss, {epochs} epoch(s)")
        return fig

    def render_png(self, steps_per_epoch: int = 1) -> bytes:
        out = io.BytesIO()
        self.figure(steps_per_epoch).savefig(out, format="png")
        return out.getvalue()

    def _show(self, cb: Any, png: bytes) -> None:
        if in_jupyter():
            from IPython.display import Image, display

            if self._handle is None:
                self._handle = display(Image(data=png), display_id=True)
            else:
                self._handle.update(Image(data=png))
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(png)
        if not self._announced:
            self._announced = True
            printer = cb.get("printer") or print
            printer(f"loss curve: {self.path.resolve()} (redrawn every epoch)")
