"""MindSpore's parameter initializers, drawn on the host with numpy (see ``graphpar.common.seed``).

``initializer(init, shape, dtype)`` accepts a name (``"normal"``, ``"zeros"``, ``"xavier_uniform"``, ...), an
:class:`Initializer`, a number or an array, and returns a ``jax.Array``. Defaults follow MindSpore: ``Normal`` has
sigma 0.01, ``Uniform`` scale 0.07, ``TruncatedNormal`` sigma 0.01 cut at two sigmas, ``HeNormal``/``HeUniform``
use fan_in and leaky_relu with slope 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar.common.seed import host_generator


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) < 2:
        raise ValueError(f"fan_in/fan_out need a shape of rank >= 2, got {shape}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _normal(size: tuple[int, ...]) -> np.ndarray:
    return host_generator().standard_normal(size=size) if size else np.asarray(host_generator().standard_normal())


def _uniform(low: float, high: float, size: tuple[int, ...]) -> np.ndarray:
    return host_generator().uniform(low, high, size=size)


class Initializer:
    """Base class: subclasses implement ``sample(shape) -> np.ndarray``."""

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> jax.Array:
        return jnp.asarray(np.asarray(self.sample(tuple(shape))).astype(np.dtype(dtype)))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Normal(Initializer):
    def __init__(self, sigma: float = 0.01, mean: float = 0.0):
        self.sigma, self.mean = sigma, mean

    def sample(self, shape):
        return self.mean + self.sigma * _normal(shape)


class Uniform(Initializer):
    def __init__(self, scale: float = 0.07):
        self.scale = scale

    def sample(self, shape):
        return _uniform(-self.scale, self.scale, shape)


class TruncatedNormal(Initializer):
    """Normal(mean, sigma) redrawn outside [a, b] (default: two sigmas either side of the mean)."""

    def __init__(self, sigma: float = 0.01, mean: float = 0.0, a: float = -2.0, b: float = 2.0):
        self.sigma, self.mean, self.a, self.b = sigma, mean, a, b

    def sample(self, shape):
        out = _normal(shape)
        low, high = self.a, self.b
        bad = (out < low) | (out > high)
        while np.any(bad):
            out[bad] = _normal((int(bad.sum()),))
            bad = (out < low) | (out > high)
        return self.mean + self.sigma * out


class XavierUniform(Initializer):
    def __init__(self, gain: float = 1.0):
        self.gain = gain

    def sample(self, shape):
        fan_in, fan_out = _fans(shape)
        bound = self.gain * math.sqrt(6.0 / (fan_in + fan_out))
        return _uniform(-bound, bound, shape)


class XavierNormal(Initializer):
    def __init__(self, gain: float = 1.0):
        self.gain = gain

    def sample(self, shape):
        fan_in, fan_out = _fans(shape)
        return self.gain * math.sqrt(2.0 / (fan_in + fan_out)) * _normal(shape)


def _he_std(shape, negative_slope, mode, nonlinearity) -> float:
    fan_in, fan_out = _fans(shape)
    fan = fan_in if mode == "fan_in" else fan_out
    if nonlinearity == "leaky_relu":
        gain = math.sqrt(2.0 / (1 + negative_slope ** 2))
    elif nonlinearity == "relu":
        gain = math.sqrt(2.0)
    elif nonlinearity == "tanh":
        gain = 5.0 / 3
    else:
        gain = 1.0
    return gain / math.sqrt(fan)


class HeNormal(Initializer):
    def __init__(self, negative_slope: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"):
        self.negative_slope, self.mode, self.nonlinearity = negative_slope, mode, nonlinearity

    def sample(self, shape):
        return _he_std(shape, self.negative_slope, self.mode, self.nonlinearity) * _normal(shape)


class HeUniform(HeNormal):
    def sample(self, shape):
        bound = math.sqrt(3.0) * _he_std(shape, self.negative_slope, self.mode, self.nonlinearity)
        return _uniform(-bound, bound, shape)


class Constant(Initializer):
    def __init__(self, value: float):
        self.value = value

    def sample(self, shape):
        return np.full(shape, self.value)


class Zero(Constant):
    def __init__(self):
        super().__init__(0.0)


class One(Constant):
    def __init__(self):
        super().__init__(1.0)


_ALIASES: dict[str, type[Initializer]] = {
    "normal": Normal, "uniform": Uniform, "truncatednormal": TruncatedNormal, "truncated_normal": TruncatedNormal,
    "xavier_uniform": XavierUniform, "xavieruniform": XavierUniform, "xavier_normal": XavierNormal,
    "he_normal": HeNormal, "henormal": HeNormal, "he_uniform": HeUniform, "heuniform": HeUniform,
    "zeros": Zero, "zero": Zero, "ones": One, "one": One,
}


def initializer(init: Any, shape: Sequence[int] | int | None = None, dtype: Any = np.float32) -> jax.Array:
    """Create an array of ``shape`` and ``dtype`` from ``init`` (MindSpore's ``initializer``)."""
    if isinstance(shape, int):
        shape = (shape,)
    if isinstance(init, (jax.Array, np.ndarray)):
        if shape is not None and tuple(init.shape) != tuple(shape):
            raise ValueError(f"initializer(): the array has shape {tuple(init.shape)} but shape={tuple(shape)}")
        return jnp.asarray(init, dtype)
    if shape is None:
        raise ValueError("initializer(): shape is required unless init is an array")
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError(f"initializer(shape={shape!r}): the shape must be a sequence of ints >= 0") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"initializer(shape={list(dims)}): dimension {dims.index(min(dims))} is {min(dims)}; every "
                         "dimension must be >= 0 (MindSpore's -1 'any size' is for inputs, not for a Parameter's "
                         "data)")
    shape = dims
    if isinstance(init, bool) or not isinstance(init, (str, int, float, Initializer)):
        raise TypeError(f"initializer(): init must be a name, an Initializer, a number or an array; got "
                        f"{type(init).__name__}")
    if isinstance(init, (int, float)):
        init = Constant(init)
    elif isinstance(init, str):
        cls = _ALIASES.get(init.lower())
        if cls is None:
            raise ValueError(f"initializer(): unknown initializer {init!r}; valid names: "
                             f"{', '.join(sorted(_ALIASES))}")
        init = cls()
    return init(shape, dtype)
