"""The global seed (MindSpore's ``set_seed``/``get_seed``) and the host-side generator keys are taken from.

Each random initializer draws with its own key, one integer taken from the host generator when the initializer
runs (:func:`draw_seed`); its values are then a JAX function of that key (``graphpar.common.deferred``), so the
same seed gives the same parameters in every mode, on every device count, drawn eagerly or where they live.
"""

from __future__ import annotations

import numpy as np

_seed: int | None = None
_generator: np.random.Generator | None = None


def set_seed(seed: int) -> None:
    """Seed parameter initialization, dropout and dataset shuffling (as ``mindspore.set_seed``)."""
    global _seed, _generator
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"set_seed(seed): seed must be an int >= 0, got {seed!r}")
    _seed = seed
    _generator = np.random.default_rng(seed)


def get_seed() -> int | None:
    return _seed


def host_generator() -> np.random.Generator | np.random.RandomState:
    """The generator keys are taken from.

    After ``set_seed`` it is graphpar's own generator. Before, it is numpy's global generator, so a script that
    calls ``np.random.seed(1)`` (as the seed quickstart does) gets the same parameters on every run and in every
    process of a job.
    """
    if _generator is None:
        return np.random.mtrand._rand
    return _generator


def draw_seed() -> int:
    """One integer from the host generator: the key of one initializer's draw (a parameter's initial values)."""
    gen = host_generator()
    draw = gen.integers if isinstance(gen, np.random.Generator) else gen.randint
    return int(draw(0, 2**31 - 1))
