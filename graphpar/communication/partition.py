"""How a communication group runs when every rank executes the op.

In MindSpore only the members of a group call an op on that group; each rank picks its group in Python
(``group = "g0" if rank < 4 else "g1"``). graphpar traces one program for all ranks, so an op named with a group
runs on every rank, and the ranks are partitioned into equal *blocks*, each reducing among itself (XLA's
``replica_groups``):

1. the named group is the first block;
2. every other registered group of the same size, disjoint from the blocks so far, in creation order, is a block
   (so ``create_group("g0", [0, 4])``, ``create_group("g1", [1, 5])``, ... and an op on ``"g0"`` give each rank
   the result over its own group, as the MindSpore script choosing ``g{rank % 4}`` would);
3. the remaining ranks form blocks in rank order.

If the remaining ranks cannot be split into blocks of the group's size, the op is refused with an error naming the
group. The world group (``None`` or a ``*_world_group`` name) is one block: plain collectives over the rank axis.
"""

from __future__ import annotations

from graphpar.communication import management
from graphpar.communication.backend import WORLD_GROUP_NAMES
from graphpar.communication.errors import CommunicationError

Blocks = tuple[tuple[int, ...], ...]


def blocks(group: str | None, world_size: int, op: str = "op") -> Blocks | None:
    """The blocks of ``group`` over ranks ``0..world_size-1``; ``None`` for the world group."""
    if group is None or group in WORLD_GROUP_NAMES:
        return None
    ranks = management._group(group)
    if max(ranks) >= world_size:
        raise CommunicationError(f"{op}(group={group!r}): the group holds rank {max(ranks)} but this per-rank run has "
                                 f"only {world_size} ranks (0..{world_size - 1})")
    size = len(ranks)
    chosen = [ranks]
    used = set(ranks)
    for other in management.registered_groups().values():
        if len(other) == size and used.isdisjoint(other) and max(other) < world_size:
            chosen.append(other)
            used.update(other)
    rest = [r for r in range(world_size) if r not in used]
    if len(rest) % size:
        raise CommunicationError(
            f"{op}(group={group!r}): every rank executes the op, so the ranks outside the group must form groups of "
            f"the same size ({size}); ranks {rest} cannot. Create groups that split all {world_size} ranks evenly "
            f"(e.g. create_group('g0', ...) and create_group('g1', ...) covering every rank)")
    chosen += [tuple(rest[i:i + size]) for i in range(0, len(rest), size)]
    return tuple(tuple(b) for b in chosen)


def group_size(group: str | None, world_size: int, op: str = "op") -> int:
    found = blocks(group, world_size, op)
    return world_size if found is None else len(found[0])
