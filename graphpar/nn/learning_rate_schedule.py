"""Learning-rate schedules (MindSpore's ``nn.learning_rate_schedule`` Cells and ``nn.dynamic_lr`` lists).

A schedule is called with the global step (0-based) and returns the learning rate for that step; it works on
traced steps inside the compiled train step.
"""

from __future__ import annotations

import math

import jax.numpy as jnp


class LearningRateSchedule:
    """Base class: implement ``__call__(global_step)``."""

    def __call__(self, global_step):
        raise NotImplementedError


def _p(step, decay_steps, is_stair):
    p = jnp.asarray(step, jnp.float32) / decay_steps
    return jnp.floor(p) if is_stair else p


class ExponentialDecayLR(LearningRateSchedule):
    def __init__(self, learning_rate: float, decay_rate: float, decay_steps: int, is_stair: bool = False):
        self.learning_rate, self.decay_rate, self.decay_steps, self.is_stair = (
            learning_rate, decay_rate, decay_steps, is_stair)

    def __call__(self, global_step):
        return self.learning_rate * self.decay_rate ** _p(global_step, self.decay_steps, self.is_stair)


class NaturalExpDecayLR(ExponentialDecayLR):
    def __call__(self, global_step):
        return self.learning_rate * jnp.exp(-self.decay_rate * _p(global_step, self.decay_steps, self.is_stair))


class InverseDecayLR(ExponentialDecayLR):
    def __call__(self, global_step):
        return self.learning_rate / (1 + self.decay_rate * _p(global_step, self.decay_steps, self.is_stair))


class CosineDecayLR(LearningRateSchedule):
    def __init__(self, min_lr: float, max_lr: float, decay_steps: int):
        self.min_lr, self.max_lr, self.decay_steps = min_lr, max_lr, decay_steps

    def __call__(self, global_step):
        p = jnp.minimum(jnp.asarray(global_step, jnp.float32), self.decay_steps) / self.decay_steps
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + jnp.cos(math.pi * p))


class PolynomialDecayLR(LearningRateSchedule):
    def __init__(self, learning_rate: float, end_learning_rate: float, decay_steps: int, power: float,
                 update_decay_steps: bool = False):
        self.learning_rate, self.end_learning_rate, self.decay_steps, self.power = (
            learning_rate, end_learning_rate, decay_steps, power)

    def __call__(self, global_step):
        p = jnp.minimum(jnp.asarray(global_step, jnp.float32), self.decay_steps) / self.decay_steps
        return (self.learning_rate - self.end_learning_rate) * (1 - p) ** self.power + self.end_learning_rate


class WarmUpLR(LearningRateSchedule):
    def __init__(self, learning_rate: float, warmup_steps: int):
        self.learning_rate, self.warmup_steps = learning_rate, warmup_steps

    def __call__(self, global_step):
        return self.learning_rate * jnp.minimum(jnp.asarray(global_step, jnp.float32), self.warmup_steps) / \
            self.warmup_steps


# --- nn.dynamic_lr: lists of per-step values --------------------------------------------------------------------
def piecewise_constant_lr(milestone: list[int], learning_rates: list[float]) -> list[float]:
    out, last = [], 0
    for m, lr in zip(milestone, learning_rates):
        out += [lr] * (m - last)
        last = m
    return out


def exponential_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch, is_stair=False):
    out = []
    for i in range(total_step):
        epoch = i // step_per_epoch
        p = epoch / decay_epoch
        out.append(learning_rate * decay_rate ** (math.floor(p) if is_stair else p))
    return out


def cosine_decay_lr(min_lr, max_lr, total_step, step_per_epoch, decay_epoch):
    out = []
    for i in range(total_step):
        epoch = min(i // step_per_epoch, decay_epoch)
        out.append(min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * epoch / decay_epoch)))
    return out


def warmup_lr(learning_rate, total_step, step_per_epoch, warmup_epoch):
    out = []
    for i in range(total_step):
        epoch = min(i // step_per_epoch + 1, warmup_epoch)
        out.append(learning_rate * epoch / warmup_epoch)
    return out
