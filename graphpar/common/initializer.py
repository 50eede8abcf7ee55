"""MindSpore's parameter initializers, each a JAX function of a key (see ``graphpar.common.deferred``).

``initializer(init, shape, dtype)`` accepts a name (``"normal"``, ``"zeros"``, ``"xavier_uniform"``, ...), an
:class:`Initializer`, a number or an array, and returns a ``jax.Array`` — or, inside ``no_init_parameters()``, a
``Deferred`` value that draws nothing until the parameter's program is compiled (then each device draws its own
block, with the values an eager draw would have). Defaults follow MindSpore: ``Normal`` has sigma 0.01,
``Uniform`` scale 0.07, ``TruncatedNormal`` sigma 0.01 cut at two sigmas, ``HeNormal``/``HeUniform`` use fan_in
and leaky_relu with slope 0. Each random draw's key is one integer from the host generator
(``graphpar.common.seed.draw_seed``: ``set_seed``, or numpy's global generator before it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from graphpar._logging import notice_once
from graphpar.common.deferred import Deferred, Draw, deferring, draw_now
from graphpar.common.seed import draw_seed


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) < 2:
        raise ValueError(f"fan_in/fan_out need a shape of rank >= 2, got {shape}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


class Initializer:
    """Base class. A built-in says what it draws for a shape (:meth:`spec`, a ``Draw``: drawn as a JAX function of
    a key, eagerly or where the parameter lives). A subclass of your own may instead implement
    ``sample(shape) -> np.ndarray``, drawn on the host when called (also inside ``no_init_parameters()``: such a
    parameter cannot be deferred, as MindSpore's numpy-made ones cannot)."""

    def spec(self, shape: tuple[int, ...]) -> Draw:
        raise NotImplementedError

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__}: implement spec(shape) or sample(shape)")

    def _draws_on_device(self) -> bool:
        return type(self).spec is not Initializer.spec

    def __call__(self, shape: Sequence[int], dtype: Any = np.float32) -> jax.Array:
        shape = tuple(shape)
        if not self._draws_on_device():
            return jax.device_put(np.asarray(self.sample(shape)).astype(np.dtype(dtype)))
        draw = self.spec(shape)
        return draw_now(draw, draw_seed() if draw.random else 0, shape, dtype)

    def deferred(self, shape: Sequence[int], dtype: Any = np.float32) -> Deferred | jax.Array:
        """The value of :meth:`__call__`, not drawn: it takes its key now (so values match an eager draw made in
        its place) and is drawn with its parameter's program. A host-only initializer (``sample``) is drawn now."""
        shape = tuple(shape)
        if not self._draws_on_device():
            notice_once(f"deferred-host-{type(self).__name__}",
                        f"no_init_parameters(): {type(self).__name__} draws on the host (it implements sample(), "
                        "not spec()); its parameters are initialized now, as MindSpore initializes parameters "
                        "made from a Tensor or numpy array")
            return self(shape, dtype)
        draw = self.spec(shape)
        return Deferred(shape, dtype, draw, draw_seed() if draw.random else 0)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Normal(Initializer):
    def __init__(self, sigma: float = 0.01, mean: float = 0.0):
        self.sigma, self.mean = sigma, mean

    def spec(self, shape):
        return Draw("normal", (self.mean, self.sigma))


class Uniform(Initializer):
    def __init__(self, scale: float = 0.07):
        self.scale = scale

    def spec(self, shape):
        return Draw("uniform", (-self.scale, self.scale))


class TruncatedNormal(Initializer):
    """Normal(mean, sigma) redrawn outside [a, b] (default: two sigmas either side of the mean)."""

    def __init__(self, sigma: float = 0.01, mean: float = 0.0, a: float = -2.0, b: float = 2.0):
        self.sigma, self.mean, self.a, self.b = sigma, mean, a, b

    def spec(self, shape):
        return Draw("truncated_normal", (self.mean, self.sigma, self.a, self.b))


class XavierUniform(Initializer):
    def __init__(self, gain: float = 1.0):
        self.gain = gain

    def spec(self, shape):
        fan_in, fan_out = _fans(shape)
        bound = self.gain * math.sqrt(6.0 / (fan_in + fan_out))
        return Draw("uniform", (-bound, bound))


class XavierNormal(Initializer):
    def __init__(self, gain: float = 1.0):
        self.gain = gain

    def spec(self, shape):
        fan_in, fan_out = _fans(shape)
        return Draw("normal", (0.0, self.gain * math.sqrt(2.0 / (fan_in + fan_out))))


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

    def spec(self, shape):
        return Draw("normal", (0.0, _he_std(shape, self.negative_slope, self.mode, self.nonlinearity)))


class HeUniform(HeNormal):
    def spec(self, shape):
        bound = math.sqrt(3.0) * _he_std(shape, self.negative_slope, self.mode, self.nonlinearity)
        return Draw("uniform", (-bound, bound))


class Constant(Initializer):
    def __init__(self, value: float):
        self.value = value

    def spec(self, shape):
        return Draw("constant", (self.value,))


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


def initializer(init: Any, shape: Sequence[int] | int | None = None,
                dtype: Any = np.float32) -> jax.Array | Deferred:
    """Create an array of ``shape`` and ``dtype`` from ``init`` (MindSpore's ``initializer``); inside
    ``no_init_parameters()`` a ``Deferred`` value (an array given as ``init`` is kept as it is)."""
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
    return init.deferred(shape, dtype) if deferring() else init(shape, dtype)
