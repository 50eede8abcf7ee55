"""``LossMonitor``: prints ``epoch: 1 step: 1, loss is 2.3025854`` (the loss as a float32)."""

from __future__ import annotations

import numpy as np

from graphpar.train.callback._callback import Callback, RunContext, loss_value


class LossMonitor(Callback):
    """``LossMonitor(per_print_times=1)``: print the loss every ``per_print_times`` steps (0: never).

    A NaN or infinite loss stops training with a ValueError naming the epoch and step, as in MindSpore.
    """

    def __init__(self, per_print_times: int = 1):
        super().__init__()
        if not isinstance(per_print_times, int) or isinstance(per_print_times, bool) or per_print_times < 0:
            raise ValueError(f"LossMonitor: per_print_times must be an int >= 0, got {per_print_times!r}")
        self._per_print_times = per_print_times
        self._last_print_time = 0

    def step_end(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        cur_epoch_num = cb_params.get("cur_epoch_num", 1)
        loss = loss_value(cb_params.net_outputs)
        cur_step_in_epoch = (cb_params.cur_step_num - 1) % cb_params.batch_num + 1
        if loss is not None and (np.isnan(loss) or np.isinf(loss)):
            raise ValueError(f"In epoch: {cur_epoch_num} step: {cur_step_in_epoch}, loss is NAN or INF, training "
                             "process cannot continue, terminating training.")
        # After a recovery rollback cur_step_num can fall behind the last print; catch up as MindSpore does.
        if self._per_print_times != 0 and cb_params.cur_step_num <= self._last_print_time:
            while cb_params.cur_step_num <= self._last_print_time:
                self._last_print_time -= max(self._per_print_times,
                                             cb_params.batch_num if cb_params.dataset_sink_mode else 1)
        if self._per_print_times != 0 and (cb_params.cur_step_num - self._last_print_time) >= self._per_print_times:
            self._last_print_time = cb_params.cur_step_num
            line = "epoch: %s step: %s, loss is %s" % (cur_epoch_num, cur_step_in_epoch, loss)
            printer = cb_params.get("printer")
            if printer is not None:
                printer(line)
            else:
                print(line, flush=True)
