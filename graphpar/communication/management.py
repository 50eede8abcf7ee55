"""Ranks, groups and ``init``: MindSpore's ``mindspore.communication`` API over ``jax.distributed``.

A *rank* is a device, as in MindSpore: rank ``r`` is ``jax.devices()[r]`` (JAX orders devices by process, so a
process driving several devices owns consecutive ranks). Device-level calls answer for this process's *first*
device: ``get_rank()`` is its rank, ``get_local_rank()`` its index among the devices of its host. The process-level
equivalents sit beside them: ``get_process_index()`` / ``get_process_count()``. With one device per process (the
``mpirun`` way) both levels coincide, exactly as in MindSpore.

Every call works on every platform (MindSpore lacks several on GPU). Groups are a registry of rank lists used by the
collective ops (``graphpar.ops.AllReduce(group=...)``); see ``graphpar.communication.partition`` for how a group
is run when every rank executes the op.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from graphpar import _cluster, _context
from graphpar.communication import backend, bootstrap
from graphpar.communication.backend import (HCCL_WORLD_COMM_GROUP, MCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP,
                                            WORLD_GROUP_NAMES)
from graphpar.communication.devices import all_devices, local_ranks
from graphpar.communication.errors import CommunicationError

__all__ = ["GlobalComm", "HCCL_WORLD_COMM_GROUP", "MCCL_WORLD_COMM_GROUP", "NCCL_WORLD_COMM_GROUP", "init",
           "release", "get_rank", "get_group_size", "get_local_rank", "get_local_rank_size", "get_process_index",
           "get_process_count", "create_group", "destroy_group", "get_world_rank_from_group_rank",
           "get_group_rank_from_world_rank", "group_ranks"]


class GlobalComm:
    """MindSpore's ``GlobalComm``: the backend in use, the world group's name, whether ``init`` ran."""

    BACKEND = "mccl"
    WORLD_COMM_GROUP = NCCL_WORLD_COMM_GROUP
    INITED = False


# name -> ranks, in creation order (the order matters: see partition.blocks)
_groups: dict[str, tuple[int, ...]] = {}


def init(backend_name: str | None = None) -> None:
    """Initialize communication (idempotent).

    ``backend_name``: ``"nccl"`` (GPU), ``"gloo"`` or ``"mccl"`` (CPU), or ``None`` to follow
    ``set_context(device_target=...)``; ``"hccl"`` (Ascend) is refused with the alternatives. In a job started by
    ``graphpar launch``, ``mpirun``, SLURM or the Dynamic Cluster variables this joins the job (see
    ``graphpar.communication.bootstrap``); a process with ``MS_ROLE=MS_SCHED`` serves as the scheduler and exits
    here. In a single process it only records the backend.
    """
    target = _context.current().device_target
    chosen = backend.resolve(backend_name, target)
    if GlobalComm.INITED and GlobalComm.BACKEND != chosen.name:
        raise CommunicationError(f"init({backend_name!r}): communication is already initialized with backend "
                                 f"{GlobalComm.BACKEND!r}; call release() first or use init({GlobalComm.BACKEND!r})")
    bootstrap.initialize(chosen.platform)
    _context.check_platform(target)  # deferred while the job was forming; the backends may start now
    _context.check_device_id(_context.current().device_id)
    GlobalComm.BACKEND = chosen.name
    GlobalComm.WORLD_COMM_GROUP = chosen.world_group
    GlobalComm.INITED = True


def release() -> None:
    """Forget the groups and mark communication as released. The JAX distributed runtime stays up until the process
    exits (JAX cannot re-join a job once its backends have started), so ``init()`` afterwards works again."""
    _groups.clear()
    GlobalComm.INITED = False


def _check_joined(api: str) -> None:
    """Refuse device queries in a multi-process job before ``init()``: they would start the backends too early."""
    if _cluster.cluster_pending():
        raise CommunicationError(f"{api}: this process belongs to a multi-process job that it has not joined yet; "
                                 "call graphpar.communication.init() first (as MindSpore requires)")


def _devices() -> list[jax.Device]:
    return all_devices()


def _is_world(group: str | None) -> bool:
    return group is None or group in WORLD_GROUP_NAMES


def _group(name: str) -> tuple[int, ...]:
    if not isinstance(name, str):
        raise CommunicationError(f"group must be a string (a name given to create_group), got {name!r}")
    if name not in _groups:
        raise CommunicationError(f"unknown communication group {name!r}; create it with create_group(name, "
                                 f"rank_ids) (known: {list(_groups) + list(WORLD_GROUP_NAMES)})")
    return _groups[name]


def group_ranks(group: str | None) -> tuple[int, ...]:
    """The world ranks of ``group`` in group order (all ranks for a world group name or ``None``)."""
    if _is_world(group):
        return tuple(range(len(_devices())))
    return _group(group)


def get_group_size(group: str | None = None) -> int:
    """Number of ranks (devices) in ``group`` (the world by default)."""
    _check_joined("get_group_size()")
    return len(group_ranks(group))


def _first_local_rank() -> int:
    return local_ranks(_devices())[0]


def get_rank(group: str | None = None) -> int:
    """Rank of this process's first device in ``group`` (the world by default).

    A process driving ``k`` devices owns ranks ``get_rank() .. get_rank() + k - 1``.
    """
    _check_joined("get_rank()")
    world = _first_local_rank()
    if _is_world(group):
        return world
    ranks = _group(group)
    me = jax.process_index()
    devices = _devices()
    mine = [r for r in ranks if devices[r].process_index == me]
    if not mine:
        last = world + jax.local_device_count() - 1
        raise CommunicationError(f"get_rank({group!r}): this process (ranks {world}..{last}) drives none of the "
                                 f"group's ranks {list(ranks)}")
    return ranks.index(mine[0])


def get_local_rank(group: str | None = None) -> int:
    """Index of this process's first device among the devices of its host (MindSpore: the rank on this server)."""
    _check_joined("get_local_rank()")
    if not _is_world(group):
        ranks = _group(group)
        host = _host_ranks()
        on_host = [r for r in ranks if r in host]
        devices = _devices()
        mine = [r for r in on_host if devices[r].process_index == jax.process_index()]
        if not mine:
            raise CommunicationError(f"get_local_rank({group!r}): this process drives none of the group's ranks "
                                     f"{list(ranks)}")
        return on_host.index(mine[0])
    return _cluster.placement().local_process_id * jax.local_device_count()


def _host_ranks() -> set[int]:
    """Ranks on this host, assuming every process of the host drives as many devices as this one."""
    k = jax.local_device_count()
    first = _first_local_rank() - _cluster.placement().local_process_id * k
    return set(range(first, first + _cluster.placement().local_process_count * k))


def get_local_rank_size(group: str | None = None) -> int:
    """Number of ranks (devices) on this host, or of ``group``'s ranks on this host."""
    _check_joined("get_local_rank_size()")
    if not _is_world(group):
        return len([r for r in _group(group) if r in _host_ranks()])
    return _cluster.placement().local_process_count * jax.local_device_count()


def get_process_index() -> int:
    """Index of this process in the job (``jax.process_index()``)."""
    _check_joined("get_process_index()")
    return jax.process_index()


def get_process_count() -> int:
    """Number of processes in the job (``jax.process_count()``)."""
    _check_joined("get_process_count()")
    return jax.process_count()


def create_group(group: str, rank_ids: Sequence[int]) -> None:
    """Register ``group`` as the world ranks ``rank_ids`` (group rank ``i`` is ``rank_ids[i]``)."""
    if not isinstance(group, str) or not group:
        raise CommunicationError(f"create_group: the group name must be a non-empty string, got {group!r}")
    try:
        ranks = tuple(int(r) for r in rank_ids)
    except (TypeError, ValueError) as exc:
        raise CommunicationError(f"create_group({group!r}, {rank_ids!r}): rank_ids must be a list of ints") from exc
    n = get_group_size()
    if group in WORLD_GROUP_NAMES or group in _groups:
        raise CommunicationError(f"create_group: the group {group!r} already exists; destroy_group({group!r}) first "
                                 "or choose another name")
    if not ranks or len(set(ranks)) != len(ranks) or any(r < 0 or r >= n for r in ranks):
        raise CommunicationError(f"create_group({group!r}, {list(rank_ids)}): rank_ids must be distinct ranks in "
                                 f"0..{n - 1} (this job has {n} ranks)")
    _groups[group] = ranks


def destroy_group(group: str) -> None:
    """Forget ``group`` (the world group cannot be destroyed)."""
    if group in WORLD_GROUP_NAMES:
        raise CommunicationError(f"destroy_group({group!r}): the world group cannot be destroyed")
    _group(group)
    del _groups[group]


def registered_groups() -> dict[str, tuple[int, ...]]:
    """A copy of the registry, in creation order."""
    return dict(_groups)


def get_world_rank_from_group_rank(group: str, group_rank_id: int) -> int:
    """The world rank of rank ``group_rank_id`` of ``group``."""
    if group in WORLD_GROUP_NAMES:
        raise CommunicationError(f"get_world_rank_from_group_rank: {group!r} is the world group (its ranks are the "
                                 "world ranks); pass a group made by create_group")
    ranks = _group(group)
    if not isinstance(group_rank_id, int) or not 0 <= group_rank_id < len(ranks):
        raise CommunicationError(f"group {group!r} has ranks 0..{len(ranks) - 1}, got group_rank_id={group_rank_id!r}")
    return ranks[group_rank_id]


def get_group_rank_from_world_rank(world_rank_id: int, group: str) -> int:
    """The rank within ``group`` of world rank ``world_rank_id``."""
    if group in WORLD_GROUP_NAMES:
        raise CommunicationError(f"get_group_rank_from_world_rank: {group!r} is the world group; pass a group made "
                                 "by create_group")
    ranks = _group(group)
    if world_rank_id not in ranks:
        raise CommunicationError(f"world rank {world_rank_id} is not in group {group!r} (ranks {list(ranks)})")
    return ranks.index(world_rank_id)
