"""``ProgressBar``: a live progress bar (rich) while ``Model.train`` runs in a terminal.

The bar shows the epoch, the step within it, the latest loss and the images per second. ``Model.train`` adds one
by itself when standard output is a terminal or a Jupyter notebook (``GRAPHPAR_PROGRESS=1`` forces it on, ``0`` off; see
:func:`with_progress_bar`); in a log file nothing changes, so logs hold exactly MindSpore's plain lines. While the
bar is live, ``LossMonitor``/``TimeMonitor`` lines go through ``cb_params["printer"]`` to the bar's console, which
prints them *above* the bar, so every ``epoch: 1 step: 1, loss is ...`` line stays on screen as it would without
the bar.
"""

from __future__ import annotations

import atexit
import sys
import time
from typing import Any

import numpy as np

from graphpar import _env
from graphpar._logging import notice_once
from graphpar.train.callback._callback import Callback, RunContext, loss_value

_LOSS_REFRESH_S = 0.2  # read the loss back at most this often (each read waits for that step to finish)


class ProgressBar(Callback):
    """``ProgressBar(console=None)``: a rich progress bar over each epoch's steps, with loss and images/s.

    ``console`` is a ``rich.console.Console`` (default: one on standard output). Lines other callbacks print
    through ``cb_params["printer"]`` appear above the bar.
    """

    def __init__(self, console: Any = None):
        super().__init__()
        self._console = console
        self._progress: Any = None
        self._task: Any = None
        self._saved_printer: Any = None
        self._epoch_start_step = 0
        self._first_step_end: tuple[float, int] | None = None  # (time, images) after the first (compiling) step
        self._images = 0
        self._loss_read_at = 0.0

    # --- lifecycle ---------------------------------------------------------------------------------------------
    def on_train_begin(self, run_context: RunContext) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        cb = run_context.original_args()
        console = self._console or Console(file=sys.stdout, force_terminal=_env.progress_bar_enabled() or None)
        self._progress = Progress(
            TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"), BarColumn(),
            TextColumn("step {task.completed}/{task.total}"), TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[rate]} img/s"), TimeElapsedColumn(), console=console,
            # redrawn from the callbacks, sys.stdout left alone: a step that fails leaves no thread running and
            # no redirected stdout behind (Model.train has no hook for failures)
            auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self._task = self._progress.add_task("train", total=self._epoch_steps(cb), epoch=cb.get("cur_epoch_num", 0),
                                             epochs=cb.get("epoch_num", 0), loss="-", rate="-")
        self._saved_printer = cb.get("printer")
        cb["printer"] = self._print
        self._first_step_end, self._images = None, 0
        self._progress.start()
        atexit.register(self._stop)  # a failing step must not leave the terminal with a hidden cursor

    def on_train_epoch_begin(self, run_context: RunContext) -> None:
        cb = run_context.original_args()
        self._epoch_start_step = cb.get("cur_step_num", 0)
        if self._progress is not None:
            # rich's reset replaces every field: carry the loss and rate over
            fields = dict(self._progress.tasks[0].fields, epoch=cb.get("cur_epoch_num", 0))
            self._progress.reset(self._task, total=self._epoch_steps(cb), **fields)
            self._progress.refresh()

    def on_train_step_end(self, run_context: RunContext) -> None:
        if self._progress is None:
            return
        cb = run_context.original_args()
        steps_done = cb.get("cur_step_num", 0) - self._epoch_start_step
        self._images += self._images_per_call(cb)
        now = time.perf_counter()
        fields: dict[str, Any] = {}
        if self._first_step_end is None:
            self._first_step_end = (now, self._images)  # the first call compiles: leave it out of the rate
        elif now > self._first_step_end[0]:
            fields["rate"] = f"{(self._images - self._first_step_end[1]) / (now - self._first_step_end[0]):.1f}"
        total = self._epoch_steps(cb)
        if now - self._loss_read_at >= _LOSS_REFRESH_S or steps_done >= total:
            loss = loss_value(cb.get("net_outputs"))
            if loss is not None:
                fields["loss"] = f"{float(loss):.4f}" if np.isfinite(loss) else str(loss)
            self._loss_read_at = now
        self._progress.update(self._task, completed=min(steps_done, total), **fields)
        if "loss" in fields:
            self._progress.refresh()  # as often as the loss is read back

    def on_train_end(self, run_context: RunContext) -> None:
        cb = run_context.original_args()
        if cb.get("printer") == self._print:
            cb["printer"] = self._saved_printer
        self._stop()

    # --- helpers -----------------------------------------------------------------------------------------------
    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        atexit.unregister(self._stop)

    def _print(self, line: str) -> None:
        console = self._progress.console if self._progress is not None else None
        if console is None:
            print(line, flush=True)
        else:
            console.print(line, markup=False, highlight=False, soft_wrap=True)

    @staticmethod
    def _epoch_steps(cb: Any) -> int:
        """Steps in one epoch as the loop runs them (a sink-mode epoch is ``sink_size`` steps)."""
        if cb.get("dataset_sink_mode"):
            return int(cb.get("sink_size") or cb.get("batch_num") or 1)
        return int(cb.get("batch_num") or 1)

    @staticmethod
    def _images_per_call(cb: Any) -> int:
        """Images the last call trained: the batch's rows, times the steps per call in sink mode."""
        batch = cb.get("train_dataset_element")
        if not batch:
            return 0
        rows = int(np.shape(batch[0])[0]) if np.ndim(batch[0]) else 1
        return rows * (int(cb.get("sink_size") or 1) if cb.get("dataset_sink_mode") else 1)


def in_jupyter() -> bool:
    """Whether this runs in a Jupyter kernel (rich's own detection, which its live display follows)."""
    from rich.console import Console

    return Console().is_jupyter


def _jupyter_bar_available() -> bool:
    """rich draws a live display in Jupyter through an ipywidgets ``Output``; without ipywidgets say so, once."""
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is not None:
        return True
    notice_once("progress-ipywidgets", "no progress bar in this notebook: rich needs ipywidgets for a live display "
                "in Jupyter (pip install 'graphpar[notebook]'); LossMonitor lines still print")
    return False


def progress_bar_wanted() -> bool:
    """``GRAPHPAR_PROGRESS`` if set (1 on, 0 off), else whether standard output is a terminal or a Jupyter
    notebook (rich renders the bar there as a live widget)."""
    forced = _env.progress_bar_enabled()
    if forced is not None:
        return forced
    try:
        if sys.stdout.isatty():
            return True
    except (AttributeError, ValueError):
        return False
    return in_jupyter() and _jupyter_bar_available()


def with_progress_bar(callbacks: Any) -> Any:
    """``callbacks`` with a :class:`ProgressBar` in front when one is wanted and none is there yet."""
    if not progress_bar_wanted() or not (callbacks is None or isinstance(callbacks, (Callback, list, tuple))):
        return callbacks  # (CallbackList reports a wrong type)
    listed = [] if callbacks is None else [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
    if any(isinstance(cb, ProgressBar) for cb in listed):
        return callbacks
    # first: its step update lands before the monitors print, and it ends (restoring the printer) first
    return [ProgressBar()] + listed
