"""``mindspore.train.loss_scale_manager``: ``FixedLossScaleManager`` and ``DynamicLossScaleManager``.

A manager describes the loss scaling of a training run; ``Model`` (or ``amp.build_train_network``) turns it into
the train cell: ``FixedLossScaleManager(drop_overflow_update=False)`` scales the loss by a constant through the
step's sensitivity (the optimizer's own ``loss_scale`` must divide it back, as in MindSpore); any other manager gives
a ``TrainOneStepWithLossScaleCell`` whose compiled step unscales, checks for overflow, skips overflowing updates and
adjusts the scale on the device (``graphpar.nn.loss_scale``). ``update_loss_scale`` is MindSpore's host-side rule,
for loops that manage the scale themselves.
"""

from __future__ import annotations

from typing import Any

from graphpar.nn.loss_scale import DynamicLossScaleUpdateCell, FixedLossScaleUpdateCell


class LossScaleManager:
    """Base class: ``get_loss_scale``, ``update_loss_scale(overflow)``, ``get_update_cell``."""

    def get_loss_scale(self) -> float:
        raise NotImplementedError

    def update_loss_scale(self, overflow: bool) -> None:
        raise NotImplementedError

    def get_update_cell(self) -> Any:
        raise NotImplementedError


class FixedLossScaleManager(LossScaleManager):
    """``FixedLossScaleManager(loss_scale=128.0, drop_overflow_update=True)``.

    With ``drop_overflow_update=False`` the loss is scaled and every update applied; set the optimizer's
    ``loss_scale`` to the same value so that the gradients are divided back (MindSpore's contract).
    """

    def __init__(self, loss_scale: float = 128.0, drop_overflow_update: bool = True):
        if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)) or loss_scale < 1:
            raise ValueError(f"FixedLossScaleManager: loss_scale must be a number >= 1, got {loss_scale!r}")
        if not isinstance(drop_overflow_update, bool):
            raise TypeError(f"FixedLossScaleManager: drop_overflow_update must be a bool, got "
                            f"{drop_overflow_update!r}")
        self._loss_scale = float(loss_scale)
        self._drop_overflow_update = drop_overflow_update

    def get_loss_scale(self) -> float:
        return self._loss_scale

    def get_drop_overflow_update(self) -> bool:
        return self._drop_overflow_update

    def update_loss_scale(self, overflow: bool) -> None:
        """A fixed scale does not change."""

    def get_update_cell(self) -> FixedLossScaleUpdateCell | None:
        return FixedLossScaleUpdateCell(self._loss_scale) if self._drop_overflow_update else None


class DynamicLossScaleManager(LossScaleManager):
    """``DynamicLossScaleManager(init_loss_scale=2**24, scale_factor=2, scale_window=2000)``: halve (divide by
    ``scale_factor``, not below 1) on overflow and skip that update; multiply by ``scale_factor`` after
    ``scale_window`` steps without overflow."""

    def __init__(self, init_loss_scale: float = 2 ** 24, scale_factor: int = 2, scale_window: int = 2000):
        if isinstance(init_loss_scale, bool) or not isinstance(init_loss_scale, (int, float)) or init_loss_scale < 1:
            raise ValueError(f"DynamicLossScaleManager: init_loss_scale must be a number >= 1, got "
                             f"{init_loss_scale!r}")
        if isinstance(scale_window, bool) or not isinstance(scale_window, int) or scale_window < 1:
            raise ValueError(f"DynamicLossScaleManager: scale_window must be an int >= 1, got {scale_window!r}")
        if isinstance(scale_factor, bool) or not isinstance(scale_factor, (int, float)) or scale_factor <= 0:
            raise ValueError(f"DynamicLossScaleManager: scale_factor must be a number > 0, got {scale_factor!r}")
        self.loss_scale = float(init_loss_scale)
        self.scale_factor = scale_factor
        self.scale_window = scale_window
        self.increase_ratio = scale_factor
        self.decrease_ratio = 1 / scale_factor
        self.cur_iter = 1
        self.last_overflow_iter = 0
        self.bad_step_max = 1000
        self.bad_step = 0

    def get_loss_scale(self) -> float:
        return self.loss_scale

    def get_drop_overflow_update(self) -> bool:
        return True

    def update_loss_scale(self, overflow: bool) -> None:
        """MindSpore's host-side rule (the compiled step uses :meth:`get_update_cell`'s device-side one)."""
        if overflow:
            self.loss_scale = max(self.loss_scale * self.decrease_ratio, 1)
            self.last_overflow_iter = self.cur_iter
            self.bad_step += 1
        else:
            if (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
                self.loss_scale *= self.increase_ratio
            self.bad_step = 0
        if self.bad_step > self.bad_step_max:
            raise RuntimeError(f"DynamicLossScaleManager: {self.bad_step} overflowing steps in a row, more than "
                               f"{self.bad_step_max}; the loss or gradients are not finite at any scale")
        self.cur_iter += 1

    def get_update_cell(self) -> DynamicLossScaleUpdateCell:
        return DynamicLossScaleUpdateCell(self.loss_scale, self.scale_factor, self.scale_window)
