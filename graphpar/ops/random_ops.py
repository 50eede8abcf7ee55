"""Random primitives with MindSpore's hidden state: ``Dropout`` draws its own key, as MindSpore's op does.

A graphpar op is pure: the random key is an input of its body (``KeyedDropout``, what ``nn.Dropout`` calls with the
key it carries). MindSpore's ``ops.Dropout(keep_prob)(x)`` takes no key: the op keeps a seed and advances it on
every call. graphpar's :class:`Dropout` does the same with an :class:`RngKey` variable of its own: the op is an NNX
graph node (``nnx.Pytree``), so inside a Cell its key is network state like ``nn.Dropout``'s: split into the
compiled step, advanced there, written back after the step, checkpointed. Outside a Cell it advances in place.

The first key is drawn from graphpar's seed (``common.seed.host_generator``, as parameter initializers and
``nn.Dropout`` draw), so ``set_seed(n)`` before building the network reproduces every mask, compiled or not;
``Seed0``/``Seed1`` other than 0 fix the key without drawing. Under DATA_PARALLEL's per-device replicas each device
folds its index into the key and draws its own mask, as each MindSpore device does with its own seed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from graphpar.common.seed import host_generator
from graphpar.communication.rank_axis import fold_in_replica
from graphpar.ops.primitive import Primitive


class RngKey(nnx.Variable):
    """The random key a stochastic Cell or op (Dropout) carries and advances on every call that draws."""


def new_key() -> jax.Array:
    """Raw key data for a fresh key drawn from graphpar's seed."""
    gen = host_generator()  # a numpy Generator after set_seed, numpy's global RandomState before
    draw = gen.integers if isinstance(gen, np.random.Generator) else gen.randint
    return jax.random.key_data(jax.random.PRNGKey(int(draw(0, 2**31 - 1))))


def _check_keep_prob(keep_prob: float) -> float:
    if isinstance(keep_prob, bool) or not isinstance(keep_prob, (int, float)) or not 0.0 < keep_prob <= 1.0:
        raise ValueError(f"Dropout: keep_prob must be in (0, 1], got {keep_prob!r}")
    return float(keep_prob)


class KeyedDropout(Primitive):
    """``KeyedDropout(keep_prob)(x, key)`` → ``(output, mask)``: MindSpore's Dropout with its key as an input (the op
    ``nn.Dropout`` calls with the key it carries). Its kind is ``Dropout`` in the IR."""

    input_names = ("x", "key")

    def __init__(self, keep_prob: float = 0.5):
        super().__init__(keep_prob=_check_keep_prob(keep_prob))

    @property
    def name(self) -> str:
        return "Dropout"

    def shard(self, in_strategy: Any, out_strategy: Any = None) -> "KeyedDropout":
        """MindSpore's Dropout strategy has one entry, ``x``'s (``((8, 1),)``); the key is graphpar's input, never
        split, so its ``()`` is added (a two-entry strategy with the key's ``()`` is accepted too)."""
        if isinstance(in_strategy, tuple) and len(in_strategy) == 1:
            in_strategy = in_strategy + ((),)
        return super().shard(in_strategy, out_strategy)

    def __call__(self, x: Any, key: Any = None) -> Any:
        if key is None:
            raise TypeError("KeyedDropout needs a PRNG key as its second input; ops.Dropout draws its own")
        return super().__call__(x, key)

    def compute(self, x, key):
        keep = self.attrs["keep_prob"]
        mask = jax.random.bernoulli(key, keep, jnp.shape(x))
        return jnp.where(mask, x / keep, jnp.zeros_like(x)), mask


class Dropout(KeyedDropout, nnx.Pytree, pytree=False):
    """``Dropout(keep_prob=0.5, Seed0=0, Seed1=0)(x)`` → ``(output, mask)``: each element of ``x`` is kept with
    probability ``keep_prob`` and scaled by ``1 / keep_prob``, else zeroed; a new mask on every call (the op's key
    advances, see the module docstring). ``Dropout(...)(x, key)`` uses the given key and leaves its own alone."""

    def __init__(self, keep_prob: float = 0.5, Seed0: int = 0, Seed1: int = 0):  # noqa: N803 (MindSpore names)
        super().__init__(keep_prob)
        for name, seed in (("Seed0", Seed0), ("Seed1", Seed1)):
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ValueError(f"Dropout: {name} must be an int >= 0, got {seed!r}")
        if Seed0 or Seed1:
            key = jax.random.key_data(jax.random.fold_in(jax.random.PRNGKey(Seed0), Seed1))
        else:
            key = new_key()
        self.rng = RngKey(key)

    def __call__(self, x: Any, key: Any = None) -> Any:
        if key is None:
            key, sub = jax.random.split(jax.random.wrap_key_data(self.rng.get_value()))
            self.rng.set_value(jax.random.key_data(key))
            key = fold_in_replica(sub)
        return super().__call__(x, key)
