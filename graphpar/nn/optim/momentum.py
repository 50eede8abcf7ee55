"""Momentum, SGD, Adam and AdamWeightDecay with MindSpore's arguments and update rules."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from graphpar.nn.optim.optimizer import Optimizer, _default_decay_filter_name


class Momentum(Optimizer):
    """``Momentum(params, learning_rate, momentum, weight_decay=0.0, loss_scale=1.0, use_nesterov=False)``.

    MindSpore's ApplyMomentum: ``v = momentum * v + g``; ``p -= lr * v`` (Nesterov: ``p -= lr * (g + momentum * v)``).
    """

    def __init__(self, params: Any, learning_rate: Any, momentum: float, weight_decay: float = 0.0,
                 loss_scale: float = 1.0, use_nesterov: bool = False):
        if momentum < 0:
            raise ValueError(f"Momentum: momentum must be >= 0, got {momentum}")
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.momentum = float(momentum)
        self.use_nesterov = bool(use_nesterov)

    def core_transform(self, learning_rate):
        return optax.sgd(learning_rate, momentum=self.momentum, nesterov=self.use_nesterov)


class SGD(Optimizer):
    """``SGD(params, learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
    loss_scale=1.0)``: ``v = momentum * v + (1 - dampening) * g`` (the first step takes ``g``)."""

    def __init__(self, params: Any, learning_rate: Any = 0.1, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, loss_scale: float = 1.0):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.momentum, self.dampening, self.nesterov = float(momentum), float(dampening), bool(nesterov)

    def core_transform(self, learning_rate):
        if self.momentum == 0:
            return optax.sgd(learning_rate)
        if self.dampening == 0:
            return optax.sgd(learning_rate, momentum=self.momentum, nesterov=self.nesterov)
        return optax.chain(_dampened_trace(self.momentum, self.dampening), optax.scale_by_learning_rate(
            learning_rate))


class _DampenedState(NamedTuple):
    trace: Any
    started: jax.Array


def _dampened_trace(momentum: float, dampening: float) -> optax.GradientTransformation:
    def init(params):
        return _DampenedState(jax.tree.map(jnp.zeros_like, params), jnp.zeros([], jnp.bool_))

    def update(grads, state, params=None):
        trace = jax.tree.map(lambda t, g: jnp.where(state.started, momentum * t + (1 - dampening) * g, g),
                             state.trace, grads)
        return trace, _DampenedState(trace, jnp.ones([], jnp.bool_))

    return optax.GradientTransformation(init, update)


class Adam(Optimizer):
    """``Adam(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
    use_nesterov=False, weight_decay=0.0, loss_scale=1.0)``; weight decay is added to the gradient (L2)."""

    def __init__(self, params: Any, learning_rate: Any = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, use_locking: bool = False, use_nesterov: bool = False,
                 weight_decay: float = 0.0, loss_scale: float = 1.0, use_amsgrad: bool = False):
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)
        self.use_nesterov, self.use_amsgrad = bool(use_nesterov), bool(use_amsgrad)

    def core_transform(self, learning_rate):
        if self.use_amsgrad:
            return optax.amsgrad(learning_rate, b1=self.beta1, b2=self.beta2, eps=self.eps)
        return optax.adam(learning_rate, b1=self.beta1, b2=self.beta2, eps=self.eps, nesterov=self.use_nesterov)


class _MomentsState(NamedTuple):
    mu: Any
    nu: Any


def _scale_by_adam_no_bias_correction(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """MindSpore's AdamWeightDecay moments: no bias correction (optax's adam always corrects)."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return _MomentsState(zeros, jax.tree.map(jnp.zeros_like, params))

    def update(grads, state, params=None):
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, grads)
        updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
        return updates, _MomentsState(mu, nu)

    return optax.GradientTransformation(init, update)


class AdamWeightDecay(Optimizer):
    """``AdamWeightDecay(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0)``:
    MindSpore's rule, ``update = m / (sqrt(v) + eps) + weight_decay * p``; ``p -= lr * update`` (no bias
    correction; ungrouped, weight decay skips names containing 'beta' or 'gamma')."""

    decoupled_weight_decay = True

    def __init__(self, params: Any, learning_rate: Any = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-6, weight_decay: float = 0.0):
        super().__init__(learning_rate, params, weight_decay, 1.0)
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    def core_transform(self, learning_rate, weight_decay=0.0):
        parts = [_scale_by_adam_no_bias_correction(self.beta1, self.beta2, self.eps)]
        if weight_decay:  # grouped parameters: every one of a group with weight_decay > 0 (as MindSpore)
            mask = None if self._grouped else (lambda p: {k: _default_decay_filter_name(k) for k in p})
            parts.append(optax.add_decayed_weights(weight_decay, mask=mask))
        parts.append(optax.scale_by_learning_rate(learning_rate))
        return optax.chain(*parts)
