"""The global seed (MindSpore's ``set_seed``/``get_seed``) and the host-side generator initializers draw from.

Initial values are drawn on the host with numpy, so the same seed gives the same parameters in every mode and on
every device count.
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
    """The generator initializers draw from.

    After ``set_seed`` it is graphpar's own generator. Before, it is numpy's global generator, so a script that
    calls ``np.random.seed(1)`` (as the seed quickstart does) gets the same parameters on every run and in every
    process of a job.
    """
    if _generator is None:
        return np.random.mtrand._rand
    return _generator
