"""``nn.Lamb``: MindSpore's LAMB optimizer (layer-wise adaptive moments) on optax."""

from __future__ import annotations

from typing import Any

import optax

from graphpar.nn.optim.optimizer import Optimizer, _default_decay_filter_name


class Lamb(Optimizer):
    """``Lamb(params, learning_rate, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0)``.

    MindSpore's rule per parameter ``w``: bias-corrected Adam moments ``m̂, v̂``; ``r = m̂ / (sqrt(v̂) + eps)``;
    ``u = r + weight_decay * w``; ``w -= lr * (||w|| / ||u||) * u``, the trust ratio taken as 1 where either norm
    is 0. Ungrouped, weight decay skips names containing 'beta' or 'gamma' (MindSpore's default filter); grouped,
    each group's ``weight_decay`` applies to all of it. ``beta1``/``beta2`` must be floats in (0, 1) and ``eps`` a
    positive float (``TypeError``/``ValueError``, as MindSpore's checks).
    """

    decoupled_weight_decay = True

    def __init__(self, params: Any, learning_rate: Any, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-6,
                 weight_decay: float = 0.0):
        for name, value in (("beta1", beta1), ("beta2", beta2), ("eps", eps)):
            if not isinstance(value, float):
                raise TypeError(f"Lamb: {name} must be a float, got {type(value).__name__} {value!r}")
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 < value < 1.0:
                raise ValueError(f"Lamb: {name} must be in (0.0, 1.0), got {value}")
        if eps <= 0:
            raise ValueError(f"Lamb: eps must be > 0, got {eps}")
        super().__init__(learning_rate, params, weight_decay, 1.0)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def core_transform(self, learning_rate, weight_decay=0.0):
        parts = [optax.scale_by_adam(b1=self.beta1, b2=self.beta2, eps=self.eps)]
        if weight_decay:
            mask = None if self._grouped else (lambda p: {k: _default_decay_filter_name(k) for k in p})
            parts.append(optax.add_decayed_weights(weight_decay, mask=mask))
        parts += [optax.scale_by_trust_ratio(), optax.scale_by_learning_rate(learning_rate)]
        return optax.chain(*parts)
