"""Ranks, groups and process bootstrap (single-process behaviour; ``init`` joins a multi-process job).

Process-level equivalents sit beside each device-level call: ``get_process_index()`` / ``get_process_count()``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

HCCL_WORLD_COMM_GROUP = "hccl_world_group"
NCCL_WORLD_COMM_GROUP = "nccl_world_group"
MCCL_WORLD_COMM_GROUP = "mccl_world_group"
_WORLD_NAMES = (HCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP, MCCL_WORLD_COMM_GROUP)


class GlobalComm:
    """MindSpore's ``GlobalComm``: the world group's name and the backend in use."""

    BACKEND = "gloo"
    WORLD_COMM_GROUP = NCCL_WORLD_COMM_GROUP
    INITED = False


_groups: dict[str, tuple[int, ...]] = {}


def init(backend_name: str | None = None) -> None:
    """Initialize communication. In one process this only records the backend; multi-process jobs are joined by
    ``graphpar.communication.bootstrap`` (launcher, Dynamic Cluster, OpenMPI, SLURM environments)."""
    from graphpar.communication import bootstrap

    bootstrap.initialize(backend_name)


def release() -> None:
    GlobalComm.INITED = False


def _devices() -> list[jax.Device]:
    from graphpar.compile.devices import all_devices

    return all_devices()


def get_group_size(group: str | None = None) -> int:
    """Number of ranks (devices) in ``group`` (the world by default)."""
    if group is None or group in _WORLD_NAMES:
        return len(_devices())
    return len(_group(group))


def get_rank(group: str | None = None) -> int:
    """Rank of this process's first device in ``group`` (the world by default)."""
    world = [i for i, d in enumerate(_devices()) if d.process_index == jax.process_index()][0]
    if group is None or group in _WORLD_NAMES:
        return world
    ranks = _group(group)
    mine = [r for r in ranks if _devices()[r].process_index == jax.process_index()]
    if not mine:
        raise ValueError(f"get_rank({group!r}): this process drives none of the group's ranks {ranks}")
    return ranks.index(mine[0])


def get_local_rank(group: str | None = None) -> int:
    """Index of this process's first device among the devices of its host."""
    return 0


def get_local_rank_size(group: str | None = None) -> int:
    """Number of devices this process drives."""
    return jax.local_device_count()


def get_process_index() -> int:
    return jax.process_index()


def get_process_count() -> int:
    return jax.process_count()


def _group(name: str) -> tuple[int, ...]:
    if name not in _groups:
        raise ValueError(f"unknown communication group {name!r}; create it with create_group(name, rank_ids) "
                         f"(known: {sorted(_groups) + list(_WORLD_NAMES)})")
    return _groups[name]


def create_group(group: str, rank_ids: Sequence[int]) -> None:
    ranks = tuple(int(r) for r in rank_ids)
    n = len(_devices())
    if group in _WORLD_NAMES or group in _groups:
        raise ValueError(f"create_group: the group {group!r} already exists")
    if len(set(ranks)) != len(ranks) or not ranks or any(r < 0 or r >= n for r in ranks):
        raise ValueError(f"create_group({group!r}, {list(rank_ids)}): rank_ids must be distinct ranks in 0..{n - 1}")
    _groups[group] = ranks


def destroy_group(group: str) -> None:
    if group in _WORLD_NAMES:
        raise ValueError("destroy_group: the world group cannot be destroyed")
    _group(group)
    del _groups[group]


def group_ranks(group: str | None) -> tuple[int, ...]:
    if group is None or group in _WORLD_NAMES:
        return tuple(range(len(_devices())))
    return _group(group)


def get_world_rank_from_group_rank(group: str, group_rank_id: int) -> int:
    ranks = _group(group)
    if not 0 <= group_rank_id < len(ranks):
        raise ValueError(f"group {group!r} has ranks 0..{len(ranks) - 1}, got {group_rank_id}")
    return ranks[group_rank_id]


def get_group_rank_from_world_rank(world_rank_id: int, group: str) -> int:
    ranks = _group(group)
    if world_rank_id not in ranks:
        raise ValueError(f"world rank {world_rank_id} is not in group {group!r} (ranks {list(ranks)})")
    return ranks.index(world_rank_id)
