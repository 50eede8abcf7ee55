"""MindSpore's sampling primitives with hidden state, drawn as ``ops.Dropout`` draws (``graphpar.ops.random_ops``):
each op carries an :class:`RngKey` of its own, from graphpar's seed (``set_seed``) when ``seed`` and ``seed2`` are
0, else fixed by them, and advances it on every call (inside a Cell the key is network state, updated by the
compiled step):

* ``UniformReal(seed=0, seed2=0)(shape)``: float32 samples of ``[0, 1)`` of ``shape`` (a tuple);
* ``Gamma(seed=0, seed2=0)(shape, alpha, beta)``: Gamma(alpha) samples over the rate ``beta``, of the broadcast of
  ``shape`` with ``alpha``'s and ``beta``'s shapes;
* ``RandomChoiceWithMask(count=256, seed=0, seed2=0)(input_x)`` → ``(index, mask)``: ``count`` positions of
  ``input_x``'s True entries in random order, as int32 coordinates ``(count, rank)``, and which rows are real
  (``mask``; when there are fewer True entries the rest are zeros, masked False).

MindSpore writes the first strategy entry of UniformReal and Gamma for the *output* (``shape`` is no tensor):
``UniformReal().shard(((2, 2),))`` splits the samples; graphpar reads it as the output strategy, the key whole.
RandomChoiceWithMask cannot be split (MindSpore's RandomChoiceWithMaskInfo), so its one entry must be all 1s.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphpar.communication.rank_axis import fold_in_replica
from graphpar.ops.primitive import Primitive
from graphpar.ops.random_ops import RngKey, new_key
from graphpar.planner.layout import is_layout_strategy


def _seed_key(kind: str, seed: Any, seed2: Any) -> RngKey:
    for name, value in (("seed", seed), ("seed2", seed2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{kind}: {name} must be an int >= 0, got {value!r}")
    if seed or seed2:
        return RngKey(jax.random.key_data(jax.random.fold_in(jax.random.PRNGKey(seed), seed2)))
    return RngKey(new_key())


class _Sampler(Primitive, nnx.Pytree, pytree=False):
    """A primitive with a key input, drawn from the op's own :class:`RngKey` on each call. Subclasses pass
    ``pytree=False`` too (an NNX graph node, not a pytree: its attrs stay plain attributes, as Dropout's)."""

    def __init__(self, seed: int = 0, seed2: int = 0, **attrs: Any):
        super().__init__(seed=seed, seed2=seed2, **attrs)
        self.rng = _seed_key(type(self).__name__, seed, seed2)

    def _next_key(self) -> jax.Array:
        key, sub = jax.random.split(jax.random.wrap_key_data(self.rng.get_value()))
        self.rng.set_value(jax.random.key_data(key))
        return jax.random.key_data(fold_in_replica(sub))

    def _strategies_for(self, shapes, scope):
        """MindSpore's first entry is the output's (the shape argument is no tensor): it becomes the output
        strategy, and the key's entry is ``(1,)``."""
        hint = self.in_strategy
        if not hint or is_layout_strategy(hint) or not shapes or len(hint[0]) == len(shapes[0]):
            return hint, self.out_strategy
        return ((1,),) + tuple(hint[1:]), (tuple(hint[0]),)


def _shape(kind: str, shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0
                                                   for d in shape):
        raise ValueError(f"{kind}: shape must be a tuple of ints >= 0, got {shape!r}")
    return tuple(shape)


class UniformReal(_Sampler, pytree=False):
    """``UniformReal(seed=0, seed2=0)(shape)``: float32 samples, uniform on ``[0, 1)``."""

    input_names = ("key",)

    def __call__(self, shape: Any) -> Any:
        return super().__call__(self._next_key(), _shape(self.name, shape))

    def compute(self, key, shape):
        return jax.random.uniform(jax.random.wrap_key_data(key), shape, jnp.float32)


class Gamma(_Sampler, pytree=False):
    """``Gamma(seed=0, seed2=0)(shape, alpha, beta)``: samples of Gamma(alpha) / beta (``beta`` the rate)."""

    input_names = ("key", "alpha", "beta")

    def _tensor_arg_indices(self):
        return (0, 2, 3)  # key, alpha, beta; the shape (argument 1) is a tuple

    def __call__(self, shape: Any, alpha: Any, beta: Any) -> Any:
        return super().__call__(self._next_key(), _shape(self.name, shape), alpha, beta)

    def compute(self, key, shape, alpha, beta):
        alpha, beta = jnp.asarray(alpha), jnp.asarray(beta)
        out_shape = jnp.broadcast_shapes(shape, alpha.shape, beta.shape)
        draws = jax.random.gamma(jax.random.wrap_key_data(key), jnp.broadcast_to(alpha, out_shape), out_shape,
                                 alpha.dtype)
        return draws / beta


class RandomChoiceWithMask(_Sampler, pytree=False):
    """``RandomChoiceWithMask(count=256, seed=0, seed2=0)(input_x)`` → ``(index, mask)``."""

    input_names = ("input_x", "key")

    def __init__(self, count: int = 256, seed: int = 0, seed2: int = 0):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"RandomChoiceWithMask: count must be an int >= 1, got {count!r}")
        super().__init__(seed, seed2, count=count)

    def shard(self, in_strategy: Any = None, out_strategy: Any = None) -> "RandomChoiceWithMask":
        """MindSpore's strategy has one entry, ``input_x``'s; the key's ``(1,)`` is added."""
        if isinstance(in_strategy, tuple) and len(in_strategy) == 1:
            in_strategy = in_strategy + ((1,),)
        return super().shard(in_strategy, out_strategy)

    def _strategies_for(self, shapes, scope):
        return self.in_strategy, self.out_strategy

    def __call__(self, input_x: Any) -> Any:
        return super().__call__(input_x, self._next_key())

    def compute(self, x, key):
        if x.dtype != jnp.bool_:
            raise TypeError(f"RandomChoiceWithMask: input_x must be a bool tensor, got {x.dtype}")
        count, flat = self.attrs["count"], x.reshape(-1)
        # True entries first, in a random order (a random score each; False entries sort last)
        scores = jnp.where(flat, jax.random.uniform(jax.random.wrap_key_data(key), flat.shape), 2.0)
        order = jnp.argsort(scores)
        picked = jnp.zeros((count,), order.dtype).at[:min(count, flat.size)].set(order[:count])
        mask = jnp.zeros((count,), jnp.bool_).at[:min(count, flat.size)].set(flat[order[:count]])
        index = jnp.stack(jnp.unravel_index(picked, x.shape), axis=-1).astype(jnp.int32)
        return jnp.where(mask[:, None], index, 0), mask


_MASK_BLOCK = 128  # DropoutGenMask rounds the element count up to a multiple of 128 bits (16 bytes)


class DropoutGenMask(_Sampler, pytree=False):
    """``DropoutGenMask(Seed0=0, Seed1=0)(shape, keep_prob)``: MindSpore's (deprecated) dropout mask, a 1-D uint8
    tensor of packed bits: bit ``i % 8`` of byte ``i // 8`` (little-endian bit order) is 1 when element ``i`` of
    ``shape`` (row-major) is kept, with probability ``keep_prob``; the element count is rounded up to a multiple of
    128, so the mask has ``ceil(n / 128) * 16`` bytes. :class:`DropoutDoMask` applies it.

    The mask is one draw for the whole ``shape``, the same bits on every device (a split DropoutDoMask slices it);
    MindSpore instead rewrites the op to draw each device's slice with a seed of its own, so the bits differ from
    MindSpore's (as any two seeds' do) while the distribution and graphpar's 1-device numerics agree."""

    input_names = ("key", "keep_prob")

    def __init__(self, Seed0: int = 0, Seed1: int = 0):  # noqa: N803 (MindSpore names)
        for name, value in (("Seed0", Seed0), ("Seed1", Seed1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"DropoutGenMask: {name} must be an int >= 0, got {value!r}")
        super().__init__(Seed0, Seed1)

    def _tensor_arg_indices(self):
        return (0, 2)  # key, keep_prob; the shape (argument 1) is a tuple

    def _strategies_for(self, shapes, scope):
        return self.in_strategy, self.out_strategy

    def __call__(self, shape: Any, keep_prob: Any) -> Any:
        return super().__call__(self._next_key(), _shape(self.name, shape), keep_prob)

    def compute(self, key, shape, keep_prob):
        count = -(-int(np.prod(shape, dtype=np.int64)) // _MASK_BLOCK) * _MASK_BLOCK
        keep = jnp.asarray(keep_prob, jnp.float32)
        bits = jax.random.bernoulli(jax.random.wrap_key_data(key), keep, (count,))
        return jnp.packbits(bits, bitorder="little")


class DropoutDoMask(Primitive):
    """``DropoutDoMask()(input_x, mask, keep_prob)``: ``input_x / keep_prob`` where ``mask``'s bit is set, else 0
    (``mask`` from :class:`DropoutGenMask` for ``input_x``'s shape).

    Its MindSpore strategy has one entry, ``input_x``'s (MindSpore's DropoutDoMaskInfo): the output follows it, the
    mask and ``keep_prob`` stay whole (their ``(1,)`` and ``()`` are added here)."""

    input_names = ("input_x", "mask", "keep_prob")
    optional_inputs = 1  # keep_prob may be a Python float

    def shard(self, in_strategy: Any = None, out_strategy: Any = None) -> "DropoutDoMask":
        if isinstance(in_strategy, tuple) and len(in_strategy) == 1 and not is_layout_strategy(in_strategy):
            in_strategy = in_strategy + ((1,),)
        return super().shard(in_strategy, out_strategy)

    def _named_strategies(self, shapes, names, scope):
        hint = self.in_strategy
        if hint and not is_layout_strategy(hint) and len(hint) == 2 and len(shapes) == 3:
            hint = tuple(hint) + ((),)
        return hint, self.out_strategy

    def compute(self, x, mask, keep_prob):
        x = jnp.asarray(x)
        need = -(-x.size // _MASK_BLOCK) * _MASK_BLOCK // 8
        if mask.dtype != jnp.uint8 or mask.ndim != 1 or mask.shape[0] != need:
            raise ValueError(f"DropoutDoMask: mask must be a 1-D uint8 tensor of {need} bytes for input_x of shape "
                             f"{tuple(x.shape)} (DropoutGenMask's output), got {mask.dtype}{list(mask.shape)}")
        bits = jnp.unpackbits(mask, bitorder="little")[:x.size].reshape(x.shape)
        keep = jnp.asarray(keep_prob, x.dtype)
        return jnp.where(bits.astype(bool), x / keep, jnp.zeros_like(x))


def _check_int(kind: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{kind}: {name} must be an int >= {low}, got {value!r}")
    return value


class UniformCandidateSampler(_Sampler, pytree=False):
    """``UniformCandidateSampler(num_true, num_sampled, unique, range_max, seed=0, remove_accidental_hits=False)
    (true_classes)`` → ``(sampled_candidates, true_expected_count, sampled_expected_count)``.

    ``num_sampled`` classes drawn uniformly from ``[0, range_max)`` (of ``true_classes``' dtype), without repeats
    when ``unique``; with ``unique`` and ``remove_accidental_hits`` no candidate is one of ``true_classes`` (unless
    too few classes are left, then MindSpore's kernel draws as if it were False, and so does this; without
    ``unique`` its kernel removes no hit, nor does this). Draws are made one at a time
    until enough are accepted, as MindSpore's kernel does; with ``tries`` the number of draws and ``p = 1 /
    range_max``, every expected count is ``p * num_sampled`` when no draw was rejected, else ``1 - (1 - p) **
    tries`` (float32, ``true_expected_count`` shaped like ``true_classes``).

    Sharding (MindSpore's UniformCandidateSamplerInfo): the strategy has one entry, ``true_classes``'; the true
    expected counts follow it, the candidates and their counts are whole on every device (one draw, the same on
    each). With ``remove_accidental_hits`` ``true_classes`` cannot be split (every device needs all of them)."""

    input_names = ("true_classes", "key")

    def __init__(self, num_true: int, num_sampled: int, unique: bool, range_max: int, seed: int = 0,
                 remove_accidental_hits: bool = False):
        kind = "UniformCandidateSampler"
        for name, value in (("unique", unique), ("remove_accidental_hits", remove_accidental_hits)):
            if not isinstance(value, bool):
                raise TypeError(f"{kind}: {name} must be a bool, got {value!r}")
        _check_int(kind, "num_true", num_true, 1)
        _check_int(kind, "num_sampled", num_sampled, 1)
        _check_int(kind, "range_max", range_max, 1)
        _check_int(kind, "seed", seed, 0)
        if unique and num_sampled > range_max:
            raise ValueError(f"{kind}: with unique=True num_sampled ({num_sampled}) must be <= range_max "
                             f"({range_max})")
        super().__init__(seed, 0, num_true=num_true, num_sampled=num_sampled, unique=unique, range_max=range_max,
                         remove_accidental_hits=remove_accidental_hits)

    def shard(self, in_strategy: Any = None, out_strategy: Any = None) -> "UniformCandidateSampler":
        """MindSpore's strategy has one entry, ``true_classes``'; the key's ``(1,)`` is added."""
        if isinstance(in_strategy, tuple) and len(in_strategy) == 1 and not is_layout_strategy(in_strategy):
            in_strategy = in_strategy + ((1,),)
        return super().shard(in_strategy, out_strategy)

    def _strategies_for(self, shapes, scope):
        return self.in_strategy, self.out_strategy

    def __call__(self, true_classes: Any) -> Any:
        return super().__call__(true_classes, self._next_key())

    def compute(self, true_classes, key):
        a = self.attrs
        n, range_max, dtype = a["num_sampled"], a["range_max"], true_classes.dtype
        key = jax.random.wrap_key_data(key)
        if not a["unique"]:  # MindSpore's kernel removes no accidental hit then either
            sampled, tries = jax.random.randint(key, (n,), 0, range_max, dtype), n
        else:
            true = true_classes.reshape(-1)
            distinct = jnp.sum(jnp.zeros((range_max,), jnp.int32).at[true].set(1, mode="drop"))
            remove = a["remove_accidental_hits"] and (n + distinct <= range_max)

            def cond(state):
                return state[1] < n

            def body(state):
                sampled, picked, tries, key = state
                key, sub = jax.random.split(key)
                draw = jax.random.randint(sub, (), 0, range_max, dtype)
                fresh = ~jnp.any(jnp.where(jnp.arange(n) < picked, sampled == draw, False))
                ok = fresh & ~(remove & jnp.any(true == draw))
                sampled = jnp.where(ok, sampled.at[picked.clip(max=n - 1)].set(draw), sampled)
                return sampled, picked + ok.astype(picked.dtype), tries + 1, key

            state = (jnp.zeros((n,), dtype), jnp.int32(0), jnp.int32(0), key)
            sampled, _, tries, _ = jax.lax.while_loop(cond, body, state)
        p = jnp.float32(1.0 / range_max)
        count = jnp.where(tries == n, p * n, -jnp.expm1(jnp.asarray(tries, jnp.float32) * jnp.log1p(-p)))
        return sampled, jnp.full(true_classes.shape, count, jnp.float32), jnp.full((n,), count, jnp.float32)
