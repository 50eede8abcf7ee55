"""Initial values as JAX functions of a key, drawn now or where the parameter will live.

Every random initializer (``graphpar.common.initializer``) reduces, for one shape, to a :class:`Draw`: a
distribution and its numbers (the shape's fan-dependent scales already applied). :func:`draw_values` is that draw
as a JAX function of an integer seed. JAX's threefry is partitionable (``jax_threefry_partitionable``, on by
default): an element's value depends on the key and on its row-major position only, so

* an eager draw (:func:`draw_now`) runs one program per distribution and *power-of-two size*, not per shape: it
  draws the flat vector padded to that size and keeps its first elements;
* a parameter created under ``no_init_parameters()`` holds a :class:`Deferred` value (its shape, dtype, draw and
  seed; nothing drawn) until its program is compiled, when :func:`born` draws every such parameter in one jitted
  program whose outputs carry the parameters' shardings: each device computes only its own block;

and both give exactly the same elements for the same seed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("normal", "uniform", "truncated_normal", "constant")
_PADDED_MIN = 1024  # eager draws smaller than this share one program


@dataclass(frozen=True)
class Draw:
    """One initializer's distribution for one shape: ``kind`` (one of :data:`KINDS`) and its ``numbers``
    (normal: mean, sigma; uniform: low, high; truncated_normal: mean, sigma, a, b in sigmas; constant: value)."""

    kind: str
    numbers: tuple[float, ...]

    @property
    def random(self) -> bool:
        return self.kind != "constant"


def draw_values(kind: str, seed: Any, numbers: Any, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """The values of a draw of ``kind`` as a JAX function of ``seed`` (a uint32 scalar) and ``numbers`` (float32
    array): drawn in float32, then cast to ``dtype``."""
    if kind == "constant":
        return jnp.full(shape, numbers[0], jnp.float32).astype(dtype)
    key = jax.random.key(seed)
    if kind == "normal":
        out = numbers[0] + numbers[1] * jax.random.normal(key, shape, jnp.float32)
    elif kind == "uniform":
        out = jax.random.uniform(key, shape, jnp.float32, numbers[0], numbers[1])
    elif kind == "truncated_normal":
        out = numbers[0] + numbers[1] * jax.random.truncated_normal(key, numbers[2], numbers[3], shape, jnp.float32)
    else:
        raise ValueError(f"unknown draw kind {kind!r}; valid: {', '.join(KINDS)}")
    return out.astype(dtype)


_flat_draw = jax.jit(draw_values, static_argnames=("kind", "shape", "dtype"))


def _numbers(draw: Draw) -> np.ndarray:
    """The draw's numbers as float32, padded to four (the most a kind has)."""
    return np.pad(np.asarray(draw.numbers, np.float32), (0, 4 - len(draw.numbers)))


def draw_now(draw: Draw, seed: int, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """The draw for ``shape`` on this process's default device (an eager initializer's value)."""
    dtype = np.dtype(dtype)
    if not draw.random:
        return jax.device_put(np.full(shape, draw.numbers[0], np.float32).astype(dtype))
    size = math.prod(shape)
    padded = max(_PADDED_MIN, 1 << max(size - 1, 0).bit_length())
    flat = _flat_draw(draw.kind, np.uint32(seed), _numbers(draw), (padded,), dtype)
    # device_put, a copy with no program (jnp.asarray compiles one per shape)
    return jax.device_put(np.array(np.asarray(flat)[:size].reshape(shape)))


class Deferred(jax.ShapeDtypeStruct):
    """A parameter's initial value not drawn yet: its shape and dtype (an abstract value tracing and planning read
    as they read an array's) with the draw and seed that make it (:func:`born`, :func:`draw_now`)."""

    __slots__ = ("draw", "seed")

    def __init__(self, shape: Sequence[int], dtype: Any, draw: Draw, seed: int):
        super().__init__(tuple(shape), np.dtype(dtype))
        object.__setattr__(self, "draw", draw)
        object.__setattr__(self, "seed", int(seed))

    def value(self) -> jax.Array:
        """The values, drawn now on the default device."""
        return draw_now(self.draw, self.seed, self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"Deferred({self.draw.kind}, shape={self.shape}, dtype={self.dtype.name})"

    __str__ = __repr__


def born(values: Sequence[Deferred], shardings: Sequence[Any] | None = None,
         then: Callable[[list[jax.Array]], Any] | None = None, then_shardings: Any = None) -> tuple[list, Any]:
    """Draw every value of ``values`` in one jitted program whose outputs lie in ``shardings`` (None: the default
    device), so that each device computes its own block only. ``then(arrays)``, when given, runs in the same
    program on the drawn arrays (an optimizer's ``init``) and its result, in ``then_shardings``, comes back second
    (None without it)."""
    draws = [(v.draw.kind, v.shape, v.dtype) for v in values]
    seeds = np.asarray([v.seed for v in values], np.uint32)
    if jax.process_count() > 1:  # every process draws its blocks with process 0's keys (an unseeded run differs)
        from jax.experimental import multihost_utils

        seeds = np.asarray(multihost_utils.broadcast_one_to_all(seeds))
    numbers = np.stack([_numbers(v.draw) for v in values]) if values else np.zeros((0, 4), np.float32)

    def initial_values(seeds_in, numbers_in):
        arrays = [draw_values(kind, seeds_in[i], numbers_in[i], shape, dtype)
                  for i, (kind, shape, dtype) in enumerate(draws)]
        return arrays, (then(arrays) if then is not None else None)

    out_shardings = None if shardings is None else (list(shardings), then_shardings)
    arrays, extra = jax.jit(initial_values, out_shardings=out_shardings)(seeds, numbers)
    return list(arrays), extra


# --- the no_init_parameters() switch -------------------------------------------------------------------------------
_deferring = 0


def deferring() -> bool:
    """Whether initializers return :class:`Deferred` values now (inside ``no_init_parameters()``)."""
    return _deferring > 0


@contextlib.contextmanager
def deferred_init() -> Iterator[None]:
    """Inside, ``initializer(...)`` returns a :class:`Deferred` value: nothing is drawn (nested uses nest)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
