"""``mindspore.dataset.config``: the pipeline-wide settings (seed, workers, read-ahead).

The settings are read when an iterator is created, never at import time, and a created iterator keeps the values it
read: changing the seed while iterating does not disturb a running epoch.

Seed resolution, in order: the seed given to :func:`set_seed` here; else ``graphpar.set_seed``'s global seed (as
``mindspore.set_seed`` also seeds the dataset engine); else MindSpore's documented default, 5489 (``std::mt19937``'s
default seed).
"""

from __future__ import annotations

from graphpar.common.seed import get_seed as global_seed
from graphpar.errors import ConfigError

DEFAULT_SEED = 5489
_MAX_SEED = 2**32 - 1

_seed: int | None = None
_seed_version = 0  # moves at every set_seed (see seed_version)
_num_parallel_workers: int | None = None  # None: graphpar chooses (dataset/autotune.py)
_prefetch_size: int | None = None
DEFAULT_WORKERS = 1  # where graphpar chooses: the start, in the calling process
DEFAULT_PREFETCH = 2
_device_prefetch: int | None = None
DEVICE_PREFETCH_ENV = "GRAPHPAR_DEVICE_PREFETCH"


def _positive_int(api: str, name: str, value: object, lowest: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
        raise ConfigError(api, name, value, reason=f"{name} must be an int >= {lowest}, got {value!r}")
    return value


def set_seed(seed: int) -> None:
    """Seed every shuffle and random transform of the pipelines iterated from now on."""
    global _seed, _seed_version
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= _MAX_SEED:
        raise ConfigError("set_seed", "seed", seed, reason=f"seed must be an int in [0, {_MAX_SEED}], got {seed!r}")
    _seed = seed
    _seed_version += 1


def seed_version() -> int:
    """How many times :func:`set_seed` was called: the eager generator (``_rng.eager_rng``) starts afresh when it
    moved."""
    return _seed_version


def get_seed() -> int:
    """The seed pipelines use now (see the module docstring for where it comes from)."""
    if _seed is not None:
        return _seed
    seed = global_seed()
    return int(seed) % (_MAX_SEED + 1) if seed is not None else DEFAULT_SEED


def set_num_parallel_workers(num: int) -> None:
    """Default worker count of the operations that do not name one, kept exactly (``Model.train`` then leaves the
    worker count as set).

    Unset, graphpar starts at 1 (work in the calling process) and ``Model.train`` raises it when the devices wait
    for data (dataset/autotune.py); MindSpore's default is 8 C++ threads, which on a small host only contend for
    the same cores.
    """
    global _num_parallel_workers
    _num_parallel_workers = _positive_int("set_num_parallel_workers", "num", num)


def get_num_parallel_workers() -> int:
    """The value set, or where graphpar chooses, the worker count it starts from (1)."""
    return DEFAULT_WORKERS if _num_parallel_workers is None else _num_parallel_workers


def num_parallel_workers_set() -> int | None:
    """The worker count :func:`set_num_parallel_workers` fixed, or None (graphpar chooses)."""
    return _num_parallel_workers


def set_prefetch_size(size: int) -> None:
    """How many pipeline outputs (rows, or batches after ``.batch``) each iterator (each worker) reads ahead, kept
    exactly. Unset: 2, which ``Model.train`` raises along with the workers when the devices wait for data."""
    global _prefetch_size
    _prefetch_size = _positive_int("set_prefetch_size", "size", size)


def get_prefetch_size() -> int:
    return DEFAULT_PREFETCH if _prefetch_size is None else _prefetch_size


def prefetch_size_set() -> int | None:
    """The read-ahead :func:`set_prefetch_size` fixed, or None (graphpar chooses)."""
    return _prefetch_size


def set_device_prefetch_size(size: int) -> None:
    """graphpar: how many global batches ``Model.train`` places on the devices ahead of the running step (a
    background thread does the transfer; 0 turns it off). Default: ``$GRAPHPAR_DEVICE_PREFETCH``, else 2."""
    global _device_prefetch
    _device_prefetch = _positive_int("set_device_prefetch_size", "size", size, lowest=0)


def get_device_prefetch_size() -> int:
    if _device_prefetch is not None:
        return _device_prefetch
    import os

    raw = os.environ.get(DEVICE_PREFETCH_ENV)
    if raw is None:
        return 2
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError("environment", DEVICE_PREFETCH_ENV, raw,
                          reason=f"{DEVICE_PREFETCH_ENV} must be an int >= 0, got {raw!r}")
    return value
