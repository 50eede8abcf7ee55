"""Where every random draw of a pipeline comes from.

A draw depends only on (pipeline seed, operation, epoch and repeat pass, sample index), never on worker count or
timing: each operation derives its own seed from those numbers here, and per-sample generators are seeded from that.
Transforms called eagerly, outside a pipeline, draw from one process-wide generator seeded from the config seed.
"""

from __future__ import annotations

import threading

import numpy as np

from graphpar.dataset import config

_eager: np.random.Generator | None = None
_eager_version = -1  # config.seed_version() when _eager was made


def derive_seed(*parts: int) -> int:
    """A 32-bit seed mixing ``parts`` (all non-negative ints); distinct inputs give independent streams."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint32)[0])


def generator(*parts: int) -> np.random.Generator:
    """A generator for the stream that ``parts`` name."""
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([int(p) for p in parts])))


def below(rng: np.random.Generator, n: int) -> int:
    """A uniform int in ``[0, n)`` from one double of ``rng`` (``n`` well below 2**52, as image offsets are):
    ``Generator.integers`` costs ~6x more per call, which a crop's two offsets per image would pay."""
    return min(int(rng.random() * n), n - 1)


def eager_rng() -> np.random.Generator:
    """The generator random transforms use when called directly (``RandomCrop(...)(image)``)."""
    global _eager, _eager_version
    if _eager is None or _eager_version != config.seed_version():
        _eager = generator(config.get_seed(), 0xEA6E)
        _eager_version = config.seed_version()
    return _eager


def reset_eager_rng() -> None:
    global _eager
    _eager = None


class SampleStreams:
    """The per-sample generators of one random map: sample ``index`` draws from Philox keyed by ``seed``, its
    counter starting at ``[0, 0, 0, index]`` (the stream grain's ``random_map`` hands each element, so a pipeline
    gives the same values through either).

    ``generator(index)`` resets one generator per thread in place (a fresh ``Philox`` costs ~5x more than the
    draws of a crop and a flip); the generator it returns is valid until the same thread asks for the next index.
    """

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._local: threading.local | None = None

    def _slot(self) -> tuple[np.random.Generator, dict, np.ndarray]:
        bits = np.random.Philox(self.seed)
        state = bits.state
        counter = np.zeros(4, np.uint64)
        state["state"]["counter"] = counter
        state["buffer"] = np.zeros(4, np.uint64)
        slot = (np.random.Generator(bits), state, counter)
        self._local.slot = slot
        return slot

    def generator(self, index: int) -> np.random.Generator:
        local = self._local
        if local is None:
            local = self._local = threading.local()
        slot = getattr(local, "slot", None)
        gen, state, counter = slot if slot is not None else self._slot()
        counter[3] = index
        state["buffer_pos"] = 4
        state["has_uint32"] = 0
        state["uinteger"] = 0
        gen.bit_generator.state = state
        return gen

    def __getstate__(self) -> dict:
        return {"seed": self.seed, "_local": None}
