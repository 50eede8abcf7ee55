"""Learning-rate schedules (MindSpore's ``nn.learning_rate_schedule`` Cells) and per-step lists (``nn.dynamic_lr``).

A schedule is called with the optimizer's global step (0-based: the first update uses step 0) and returns that
step's learning rate; it works on traced steps inside the compiled train step. A list gives one value per step
(``lr[i]`` for update ``i``, counted over every ``Model.train`` call on the same optimizer).

The formulas are MindSpore's code, which is what MindSpore runs where its docs' formula says otherwise:
``NaturalExpDecayLR`` decays with ``exp(-decay_rate * step)`` (``decay_steps`` only matters with ``is_stair``), and
``natural_exp_decay_lr`` with ``exp(-decay_rate * epoch)``; ``warmup_lr`` starts at 0 (epoch 0 has rate 0).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp


def _float(who: str, name: str, value: object, minimum: float = 0.0, strict: bool = True) -> float:
    """``value`` as a float > ``minimum`` (>= with ``strict=False``); a one-line error naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: {name} must be a float, got {value!r}")
    if value < minimum or (strict and value == minimum):
        raise ValueError(f"{who}: {name} must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return float(value)


def _int(who: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{who}: {name} must be an int >= 1, got {value!r}")
    return int(value)


def _bool(who: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{who}: {name} must be a bool, got {value!r}")
    return value


def _step(global_step):
    return jnp.asarray(global_step, jnp.float32)


class LearningRateSchedule:
    """Base class: implement ``__call__(global_step)``."""

    def __call__(self, global_step):
        raise NotImplementedError


class _Decay(LearningRateSchedule):
    def __init__(self, learning_rate: float, decay_rate: float, decay_steps: int, is_stair: bool = False):
        who = type(self).__name__
        self.learning_rate = _float(who, "learning_rate", learning_rate)
        self.decay_rate = _float(who, "decay_rate", decay_rate)
        self.decay_steps = _int(who, "decay_steps", decay_steps)
        self.is_stair = _bool(who, "is_stair", is_stair)

    def _p(self, global_step):
        p = _step(global_step) / self.decay_steps
        return jnp.floor(p) if self.is_stair else p


class ExponentialDecayLR(_Decay):
    """``learning_rate * decay_rate ** p``, ``p = step / decay_steps`` (floored with ``is_stair``)."""

    def __call__(self, global_step):
        return self.learning_rate * self.decay_rate ** self._p(global_step)


class NaturalExpDecayLR(_Decay):
    """``learning_rate * exp(-decay_rate * p)`` with ``p = step`` (``floor(step / decay_steps) * decay_steps``
    with ``is_stair``), as MindSpore's code computes it."""

    def __call__(self, global_step):
        p = _step(global_step)
        if self.is_stair:
            p = jnp.floor(p / self.decay_steps) * self.decay_steps
        return self.learning_rate * jnp.exp(-self.decay_rate * p)


class InverseDecayLR(_Decay):
    """``learning_rate / (1 + decay_rate * p)``, ``p = step / decay_steps`` (floored with ``is_stair``)."""

    def __call__(self, global_step):
        return self.learning_rate / (1 + self.decay_rate * self._p(global_step))


class CosineDecayLR(LearningRateSchedule):
    """``min_lr + (max_lr - min_lr) / 2 * (1 + cos(pi * min(step, decay_steps) / decay_steps))``."""

    def __init__(self, min_lr: float, max_lr: float, decay_steps: int):
        self.min_lr = _float("CosineDecayLR", "min_lr", min_lr, strict=False)
        self.max_lr = _float("CosineDecayLR", "max_lr", max_lr)
        self.decay_steps = _int("CosineDecayLR", "decay_steps", decay_steps)
        if self.min_lr >= self.max_lr:
            raise ValueError(f"CosineDecayLR: max_lr must be greater than min_lr, got max_lr={max_lr}, "
                             f"min_lr={min_lr}")

    def __call__(self, global_step):
        p = jnp.minimum(_step(global_step), self.decay_steps) / self.decay_steps
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + jnp.cos(math.pi * p))


class PolynomialDecayLR(LearningRateSchedule):
    """``(learning_rate - end) * (1 - s / d) ** power + end`` with ``s = min(step, decay_steps)``, ``d =
    decay_steps``; with ``update_decay_steps`` ``s = step`` and ``d = decay_steps * max(ceil(step / decay_steps),
    1)`` (the decay restarts every ``decay_steps``)."""

    def __init__(self, learning_rate: float, end_learning_rate: float, decay_steps: int, power: float,
                 update_decay_steps: bool = False):
        who = "PolynomialDecayLR"
        self.learning_rate = _float(who, "learning_rate", learning_rate)
        self.end_learning_rate = _float(who, "end_learning_rate", end_learning_rate, strict=False)
        self.decay_steps = _int(who, "decay_steps", decay_steps)
        self.power = _float(who, "power", power)
        self.update_decay_steps = _bool(who, "update_decay_steps", update_decay_steps)

    def __call__(self, global_step):
        step = _step(global_step)
        if self.update_decay_steps:
            decay = self.decay_steps * jnp.maximum(jnp.ceil(step / self.decay_steps), 1.0)
        else:
            step, decay = jnp.minimum(step, self.decay_steps), self.decay_steps
        return (self.learning_rate - self.end_learning_rate) * (1 - step / decay) ** self.power + \
            self.end_learning_rate


class WarmUpLR(LearningRateSchedule):
    """``learning_rate * min(step, warmup_steps) / warmup_steps`` (step 0 has rate 0)."""

    def __init__(self, learning_rate: float, warmup_steps: int):
        self.learning_rate = _float("WarmUpLR", "learning_rate", learning_rate, strict=False)
        self.warmup_steps = _int("WarmUpLR", "warmup_steps", warmup_steps)

    def __call__(self, global_step):
        return self.learning_rate * jnp.minimum(_step(global_step), self.warmup_steps) / self.warmup_steps


# --- nn.dynamic_lr: lists of per-step values, computed per epoch (epoch = floor(step / step_per_epoch)) ---------
def _per_epoch(who: str, total_step: int, step_per_epoch: int, rate: Callable[[int], float]) -> list[float]:
    total_step = _int(who, "total_step", total_step)
    step_per_epoch = _int(who, "step_per_epoch", step_per_epoch)
    return [rate(i // step_per_epoch) for i in range(total_step)]


def piecewise_constant_lr(milestone: list[int], learning_rates: list[float]) -> list[float]:
    """``learning_rates[t]`` for steps ``[milestone[t-1], milestone[t])``; ``milestone[-1]`` values in all."""
    if not isinstance(milestone, (list, tuple)) or not isinstance(learning_rates, (list, tuple)):
        raise TypeError("piecewise_constant_lr: milestone and learning_rates must be lists or tuples")
    if len(milestone) != len(learning_rates):
        raise ValueError(f"piecewise_constant_lr: milestone has {len(milestone)} values, learning_rates "
                         f"{len(learning_rates)}; they must be as long")
    out: list[float] = []
    last = 0
    for i, (m, lr) in enumerate(zip(milestone, learning_rates)):
        m = _int("piecewise_constant_lr", f"milestone[{i}]", m)
        if m < last:
            raise ValueError(f"piecewise_constant_lr: milestone must increase, got milestone[{i}]={m} after {last}")
        out += [_float("piecewise_constant_lr", f"learning_rates[{i}]", lr, strict=False)] * (m - last)
        last = m
    return out


def _decay_args(who: str, learning_rate: Any, decay_rate: Any, decay_epoch: Any,
                is_stair: Any) -> tuple[float, float, int, bool]:
    """The checked arguments the exponential, natural-exponential and inverse decay lists share."""
    return (_float(who, "learning_rate", learning_rate), _float(who, "decay_rate", decay_rate),
            _int(who, "decay_epoch", decay_epoch), _bool(who, "is_stair", is_stair))


def exponential_decay_lr(learning_rate: float, decay_rate: float, total_step: int, step_per_epoch: int,
                         decay_epoch: int, is_stair: bool = False) -> list[float]:
    """``learning_rate * decay_rate ** (epoch / decay_epoch)`` (the exponent floored with ``is_stair``)."""
    who = "exponential_decay_lr"
    lr, rate, decay_epoch, stair = _decay_args(who, learning_rate, decay_rate, decay_epoch, is_stair)
    return _per_epoch(who, total_step, step_per_epoch,
                      lambda e: lr * rate ** (math.floor(e / decay_epoch) if stair else e / decay_epoch))


def natural_exp_decay_lr(learning_rate: float, decay_rate: float, total_step: int, step_per_epoch: int,
                         decay_epoch: int, is_stair: bool = False) -> list[float]:
    """``learning_rate * exp(-decay_rate * epoch)`` (epoch rounded down to a multiple of ``decay_epoch`` with
    ``is_stair``)."""
    who = "natural_exp_decay_lr"
    lr, rate, decay_epoch, stair = _decay_args(who, learning_rate, decay_rate, decay_epoch, is_stair)
    return _per_epoch(who, total_step, step_per_epoch,
                      lambda e: lr * math.e ** (-rate * (e // decay_epoch * decay_epoch if stair else e)))


def inverse_decay_lr(learning_rate: float, decay_rate: float, total_step: int, step_per_epoch: int,
                     decay_epoch: int, is_stair: bool = False) -> list[float]:
    """``learning_rate / (1 + decay_rate * epoch / decay_epoch)`` (the ratio floored with ``is_stair``)."""
    who = "inverse_decay_lr"
    lr, rate, decay_epoch, stair = _decay_args(who, learning_rate, decay_rate, decay_epoch, is_stair)
    return _per_epoch(who, total_step, step_per_epoch,
                      lambda e: lr / (1 + rate * (math.floor(e / decay_epoch) if stair else e / decay_epoch)))


def cosine_decay_lr(min_lr: float, max_lr: float, total_step: int, step_per_epoch: int,
                    decay_epoch: int) -> list[float]:
    """``min_lr + (max_lr - min_lr) / 2 * (1 + cos(pi * min(epoch, decay_epoch) / decay_epoch))``."""
    who = "cosine_decay_lr"
    lo, hi = _float(who, "min_lr", min_lr, strict=False), _float(who, "max_lr", max_lr)
    if lo >= hi:
        raise ValueError(f"cosine_decay_lr: max_lr must be greater than min_lr, got max_lr={max_lr}, min_lr={min_lr}")
    decay_epoch = _int(who, "decay_epoch", decay_epoch)
    return _per_epoch(who, total_step, step_per_epoch,
                      lambda e: lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * min(e, decay_epoch) / decay_epoch)))


def polynomial_decay_lr(learning_rate: float, end_learning_rate: float, total_step: int, step_per_epoch: int,
                        decay_epoch: int, power: float, update_decay_epoch: bool = False) -> list[float]:
    """``(learning_rate - end) * (1 - e / d) ** power + end`` with ``e = min(epoch, decay_epoch)``, ``d =
    decay_epoch``; with ``update_decay_epoch`` ``e = epoch``, ``d = decay_epoch * max(ceil(epoch / decay_epoch),
    1)``."""
    who = "polynomial_decay_lr"
    lr = _float(who, "learning_rate", learning_rate)
    end = _float(who, "end_learning_rate", end_learning_rate, strict=False)
    decay_epoch, power = _int(who, "decay_epoch", decay_epoch), _float(who, "power", power)
    update = _bool(who, "update_decay_epoch", update_decay_epoch)

    def rate(e: int) -> float:
        if update:
            d = decay_epoch * max(math.ceil(e / decay_epoch), 1)
        else:
            e, d = min(e, decay_epoch), decay_epoch
        return (lr - end) * (1 - e / d) ** power + end

    return _per_epoch(who, total_step, step_per_epoch, rate)


def warmup_lr(learning_rate: float, total_step: int, step_per_epoch: int, warmup_epoch: int) -> list[float]:
    """``learning_rate * min(epoch, warmup_epoch) / warmup_epoch``: epoch 0 has rate 0, as in MindSpore."""
    lr = _float("warmup_lr", "learning_rate", learning_rate, strict=False)
    warmup_epoch = _int("warmup_lr", "warmup_epoch", warmup_epoch)
    return _per_epoch("warmup_lr", total_step, step_per_epoch, lambda e: lr * min(e, warmup_epoch) / warmup_epoch)
