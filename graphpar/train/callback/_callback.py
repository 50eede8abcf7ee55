"""``Callback``, ``RunContext`` and the callback list, with MindSpore's hooks and their older aliases.

The new hooks (``on_train_step_end``, ...) call the old ones (``step_end``, ...) by default, exactly as in MindSpore,
so a callback written against either API works.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Callback:
    """Base class: override the hooks you need. ``run_context.original_args()`` holds the training state."""

    def __enter__(self) -> "Callback":
        return self

    def __exit__(self, *err: Any) -> None:
        return None

    # older names (MindSpore < 2.0); the on_* hooks call them
    def begin(self, run_context: "RunContext") -> None: ...
    def epoch_begin(self, run_context: "RunContext") -> None: ...
    def epoch_end(self, run_context: "RunContext") -> None: ...
    def step_begin(self, run_context: "RunContext") -> None: ...
    def step_end(self, run_context: "RunContext") -> None: ...
    def end(self, run_context: "RunContext") -> None: ...

    def on_train_begin(self, run_context): self.begin(run_context)
    def on_train_epoch_begin(self, run_context): self.epoch_begin(run_context)
    def on_train_epoch_end(self, run_context): self.epoch_end(run_context)
    def on_train_step_begin(self, run_context): self.step_begin(run_context)
    def on_train_step_end(self, run_context): self.step_end(run_context)
    def on_train_end(self, run_context): self.end(run_context)
    def on_eval_begin(self, run_context): self.begin(run_context)
    def on_eval_epoch_begin(self, run_context): self.epoch_begin(run_context)
    def on_eval_epoch_end(self, run_context): self.epoch_end(run_context)
    def on_eval_step_begin(self, run_context): self.step_begin(run_context)
    def on_eval_step_end(self, run_context): self.step_end(run_context)
    def on_eval_end(self, run_context): self.end(run_context)


class InternalCallbackParam(dict):
    """The dict behind ``run_context.original_args()``; keys are also attributes (``cb_params.cur_step_num``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class RunContext:
    """Handed to every hook: ``original_args()`` (the callback parameters), ``request_stop()``."""

    def __init__(self, original_args: dict):
        if not isinstance(original_args, dict):
            raise TypeError(f"RunContext(original_args) must be a dict, got {type(original_args).__name__}")
        self._original_args = original_args
        self._stop_requested = False

    def original_args(self) -> dict:
        return self._original_args

    def request_stop(self) -> None:
        self._stop_requested = True

    def get_stop_requested(self) -> bool:
        return self._stop_requested


class CallbackList(Callback):
    """Calls every callback's hook in order."""

    def __init__(self, callbacks: Any):
        if callbacks is None:
            callbacks = []
        elif isinstance(callbacks, Callback):
            callbacks = [callbacks]
        elif isinstance(callbacks, (list, tuple)):
            for cb in callbacks:
                if not isinstance(cb, Callback):
                    raise TypeError(f"callbacks must be Callback objects, got {type(cb).__name__}")
            callbacks = list(callbacks)
        else:
            raise TypeError(f"callbacks must be a Callback or a list of Callbacks, got {type(callbacks).__name__}")
        self.callbacks = callbacks

    def _each(self, hook: str, run_context: RunContext) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(run_context)

    def on_train_begin(self, rc): self._each("on_train_begin", rc)
    def on_train_epoch_begin(self, rc): self._each("on_train_epoch_begin", rc)
    def on_train_epoch_end(self, rc): self._each("on_train_epoch_end", rc)
    def on_train_step_begin(self, rc): self._each("on_train_step_begin", rc)
    def on_train_step_end(self, rc): self._each("on_train_step_end", rc)
    def on_train_end(self, rc): self._each("on_train_end", rc)
    def on_eval_begin(self, rc): self._each("on_eval_begin", rc)
    def on_eval_epoch_begin(self, rc): self._each("on_eval_epoch_begin", rc)
    def on_eval_epoch_end(self, rc): self._each("on_eval_epoch_end", rc)
    def on_eval_step_begin(self, rc): self._each("on_eval_step_begin", rc)
    def on_eval_step_end(self, rc): self._each("on_eval_step_end", rc)
    def on_eval_end(self, rc): self._each("on_eval_end", rc)


def loss_value(net_outputs: Any) -> Any:
    """The loss a monitor prints: the mean of the output (first element of a tuple), as a numpy float32."""
    if isinstance(net_outputs, (tuple, list)):
        net_outputs = net_outputs[0]
    if net_outputs is None:
        return None
    return np.float32(np.mean(np.asarray(net_outputs, dtype=np.float32)))
