"""MindSpore 2.x's functional loss scaling (``mindspore.amp``): ``StaticLossScaler``, ``DynamicLossScaler``.

A loop written with ``value_and_grad`` scales the loss itself::

    loss_scaler = amp.DynamicLossScaler(scale_value=2**16, scale_factor=2, scale_window=50)
    def forward_fn(data, label):
        loss = loss_fn(net(data), label)
        return loss_scaler.scale(loss)
    ...
    loss, grads = grad_fn(data, label)
    loss, grads = loss_scaler.unscale(loss), loss_scaler.unscale(grads)
    is_finite = amp.all_finite(grads)
    if is_finite:
        optimizer(grads)
    loss_scaler.adjust(is_finite)

``scale`` multiplies a Tensor (or every Tensor of a tuple/list/dict) by the current scale, ``unscale`` divides it,
each cast to the input's dtype as MindSpore's ``_grad_scale`` does. ``adjust(grads_finite)`` is MindSpore's rule
for this API, which differs from ``DynamicLossScaleUpdateCell``'s (``graphpar.nn.loss_scale``, used by ``Model``):
a counter counts finite steps modulo ``scale_window``; when it reaches ``scale_window - 1`` on a finite step the
scale is multiplied by ``scale_factor`` (unless that product overflows float32); a step that is not finite divides
the scale by ``scale_factor`` (never below 1) and resets the counter. ``adjust`` returns True, as MindSpore's.

The scale and the counter are Parameters (``scale_value``, ``counter``; never trained), as MindSpore keeps them: read
``loss_scaler.scale_value.asnumpy()``. The scaler is a Cell (MindSpore's is a ``jit_class``; it is not called
itself) so that a compiled step closing over it finds them as state, like a Dropout key; outside a compiled program
they change in place.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell


def _scale_tree(inputs: Any, factor: jax.Array, invert: bool) -> Any:
    def one(x: Any) -> Any:
        x = jnp.asarray(x)
        f = factor.astype(x.dtype)
        return x / f if invert else x * f
    return jax.tree.map(one, inputs)


def _number(value: Any, who: str, name: str, kind: type, minimum: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or (
            kind is int and not float(value).is_integer()) or value < minimum:
        what = "an int" if kind is int else "a number"
        raise ValueError(f"{who}: {name} must be {what} >= {minimum:g}, got {value!r}")
    return kind(value)


class LossScaler(Cell):
    """Base class: ``scale(inputs)``, ``unscale(inputs)``, ``adjust(grads_finite)`` over the Parameter
    ``scale_value``."""

    def __init__(self, scale_value: float):
        super().__init__()
        value = _number(scale_value, type(self).__name__, "scale_value", float, 0.0)
        if value == 0.0:
            raise ValueError(f"{type(self).__name__}: scale_value must be a number > 0, got {scale_value!r}")
        self.scale_value = Parameter(jnp.float32(value), name="scale_value", requires_grad=False)
        self.counter = Parameter(jnp.int32(0), name="counter", requires_grad=False)

    def scale(self, inputs: Any) -> Any:
        """``inputs`` (the loss, or the gradients) multiplied by the current scale."""
        return _scale_tree(inputs, self.scale_value.get_value(), invert=False)

    def unscale(self, inputs: Any) -> Any:
        """``inputs`` divided by the current scale (``inputs /= scale_value``)."""
        return _scale_tree(inputs, self.scale_value.get_value(), invert=True)

    def adjust(self, grads_finite: Any) -> Any:
        raise NotImplementedError


class StaticLossScaler(LossScaler):
    """``StaticLossScaler(scale_value)``: a constant scale; ``adjust`` changes nothing (and returns None, as
    MindSpore's)."""

    def adjust(self, grads_finite: Any) -> None:
        return None


class DynamicLossScaler(LossScaler):
    """``DynamicLossScaler(scale_value, scale_factor, scale_window)``: the largest scale that keeps the gradients
    finite (MindSpore's rule: see the module docstring)."""

    def __init__(self, scale_value: float, scale_factor: int, scale_window: int):
        super().__init__(scale_value)
        self.scale_factor = _number(scale_factor, "DynamicLossScaler", "scale_factor", int, 1)
        self.scale_window = _number(scale_window, "DynamicLossScaler", "scale_window", int, 1)

    def adjust(self, grads_finite: Any) -> bool:
        """Adjust ``scale_value`` (and the counter) after a step whose gradients were ``grads_finite``."""
        finite = jnp.asarray(grads_finite, dtype=jnp.bool_).reshape(())
        scale = self.scale_value.get_value()
        counter = self.counter.get_value()
        grown = scale * jnp.float32(self.scale_factor)
        grow = (counter == self.scale_window - 1) & jnp.isfinite(grown)
        on_finite = jnp.where(grow, grown, scale)
        on_overflow = jnp.maximum(jnp.float32(1.0), scale / jnp.float32(self.scale_factor))
        self.scale_value.set_value(jnp.where(finite, on_finite, on_overflow))
        self.counter.set_value(((counter + 1) % self.scale_window) * finite.astype(jnp.int32))
        return True
