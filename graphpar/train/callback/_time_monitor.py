"""``TimeMonitor``: per-step time at the end of each epoch, as MindSpore prints it."""

from __future__ import annotations

import time

from graphpar.train.callback._callback import Callback, RunContext


class TimeMonitor(Callback):
    """``TimeMonitor(data_size=None)``: prints ``epoch time: X ms, per step time: Y ms`` after each epoch."""

    def __init__(self, data_size: int | None = None, data_time: bool = False):
        super().__init__()
        if data_size is not None and (not isinstance(data_size, int) or data_size <= 0):
            raise ValueError(f"TimeMonitor: data_size must be a positive int, got {data_size!r}")
        self.data_size = data_size
        self.epoch_time = 0.0
        self.per_step_ms: list[float] = []

    def epoch_begin(self, run_context: RunContext) -> None:
        self.epoch_time = time.perf_counter()

    def epoch_end(self, run_context: RunContext) -> None:
        elapsed_ms = (time.perf_counter() - self.epoch_time) * 1000
        cb_params = run_context.original_args()
        steps = self.data_size or (cb_params.batch_num if not cb_params.get("dataset_sink_mode")
                                   else cb_params.get("sink_size", cb_params.batch_num))
        per_step = elapsed_ms / max(int(steps), 1)
        self.per_step_ms.append(per_step)
        line = f"epoch time: {elapsed_ms:.3f} ms, per step time: {per_step:.3f} ms"
        printer = cb_params.get("printer")
        (printer or (lambda s: print(s, flush=True)))(line)
