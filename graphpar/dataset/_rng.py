"""Where every random draw of a pipeline comes from.

A draw depends only on (pipeline seed, operation, epoch and repeat pass, sample index), never on worker count or
timing: each operation derives its own seed from those numbers here, and per-sample generators are seeded from that.
Transforms called eagerly, outside a pipeline, draw from one process-wide generator seeded from the config seed.
"""

from __future__ import annotations

import numpy as np

_eager: np.random.Generator | None = None


def derive_seed(*parts: int) -> int:
    """A 32-bit seed mixing ``parts`` (all non-negative ints); distinct inputs give independent streams."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint32)[0])


def generator(*parts: int) -> np.random.Generator:
    """A generator for the stream that ``parts`` name."""
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([int(p) for p in parts])))


def eager_rng() -> np.random.Generator:
    """The generator random transforms use when called directly (``RandomCrop(...)(image)``)."""
    global _eager
    if _eager is None:
        from graphpar.dataset import config

        _eager = generator(config.get_seed(), 0xEA6E)
    return _eager


def reset_eager_rng() -> None:
    global _eager
    _eager = None
