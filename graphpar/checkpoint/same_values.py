"""A collective save of values each process holds for itself: refused when the processes hold different values.

A graphpar checkpoint holds one value per name, written by all processes together; an array that only this process
holds (a host value, a one-process ``jax.Array``) is taken as the same on every process, and process 0's copy is
written. That is true of every value graphpar's plans place, but not of per-rank training (STAND_ALONE manual
parallel, one device per process: each rank trains its own slice of a weight), where writing process 0's copy would
silently lose every other rank's values and a reload would give rank 1 rank 0's weights. So before such a save the
processes compare a digest of each process-local value (one small all-gather) and all refuse together, naming the
first value that differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from graphpar.checkpoint.errors import CheckpointError

_DIGEST = 8  # bytes per value: enough to tell values apart, small to gather


def _digest(value: np.ndarray) -> np.ndarray:
    data = np.ascontiguousarray(value)
    return np.frombuffer(hashlib.blake2b(data.tobytes(), digest_size=_DIGEST).digest(), np.uint8)


def check_same_on_every_process(path: str, names: Sequence[str], local_values: Sequence[Any]) -> None:
    """Refuse (on every process alike) to save ``local_values`` (the process-local values of the checkpoint,
    named ``names``) when any of them differs between processes. Collective; a no-op in a one-process job."""
    if jax.process_count() == 1 or not names:
        return
    from jax.experimental import multihost_utils

    mine = np.stack([_digest(np.asarray(v)) for v in local_values])
    every = np.asarray(multihost_utils.process_allgather(mine))  # (processes, values, _DIGEST)
    differs = [i for i in range(len(names)) if not (every[:, i] == every[0, i]).all()]
    if differs:
        first = names[differs[0]]
        more = f" (and {len(differs) - 1} more)" if len(differs) > 1 else ""
        raise CheckpointError(path, f"'{first}'{more} has different values on the processes of this job (per-rank "
                              "values, as STAND_ALONE manual parallel trains them); a graphpar checkpoint holds one "
                              "value per name, written by all processes together, so the other ranks' values "
                              "would be lost",
                              "Save each rank's values yourself (np.save(f'rank_{get_rank()}.npy', "
                              "param.asnumpy())), or train with a parallel mode whose plan places the parameters "
                              "(DATA_PARALLEL, SEMI_AUTO_PARALLEL)")
