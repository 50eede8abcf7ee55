"""Collective communication ops: ``AllGather``, ``AllReduce``, ``ReduceScatter``, ``Broadcast``, ``AlltoAll``.

MindSpore runs one process per device, so an op in ``construct`` runs once per rank. graphpar gives them the same
meaning wherever the code runs once per rank, over the *rank axis* of that run (``graphpar.communication.rank_axis``):

* a top-level GRAPH_MODE call of a Cell holding these ops (``graphpar.compile.runtime.spmd_call``);
* DATA_PARALLEL training (the per-device loss runs under ``jax.vmap`` over the devices);
* :func:`graphpar.compile.runtime.spmd_call.run_per_rank` for plain functions.

Anywhere else (a STAND_ALONE train step, eager code) there is only one program for all ranks and the op raises a
:class:`~graphpar.communication.errors.CommunicationError` saying so. The math and MindSpore's gradients are in
``graphpar.communication.collectives``; sub-groups made by ``create_group`` are run as ``partition`` explains.
"""

from __future__ import annotations

from typing import Any

from graphpar.communication import collectives, partition
from graphpar.communication.backend import WORLD_GROUP_NAMES
from graphpar.communication.errors import CommunicationError
from graphpar.communication.management import GlobalComm
from graphpar.communication.rank_axis import RankAxis, current_rank_axis
from graphpar.ops.primitive import Primitive, _is_tensor


class ReduceOp:
    """Reduction kinds, spelled as MindSpore spells them (``ReduceOp.SUM == "sum"``)."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"


_OPS = (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PROD)


def _world_name() -> str:
    return GlobalComm.WORLD_COMM_GROUP


class Collective(Primitive):
    """Base of the collective ops: holds the group, finds the rank axis, refuses to run without one."""

    def __init__(self, group: str | None = None, **attrs: Any) -> None:
        group = _world_name() if group is None else group
        if not isinstance(group, str):
            raise CommunicationError(f"ops.{type(self).__name__}(group={group!r}): group must be a string (a world "
                                     f"group name such as {WORLD_GROUP_NAMES[1]!r}, or a name given to create_group)")
        super().__init__(group=group, **attrs)
        self.group = group

    def _rank_axis(self) -> RankAxis:
        axis = current_rank_axis()
        if axis is None:
            raise CommunicationError(
                f"ops.{self.name} ('{self.instance_name}') only means something when the code runs once per rank. "
                "Run it inside a per-rank run: call the Cell at top level in GRAPH_MODE (each argument is this "
                "process's data, split over its devices), train with parallel_mode=DATA_PARALLEL, or use "
                "graphpar.compile.runtime.spmd_call.run_per_rank(fn, *args)")
        return axis

    def _blocks(self, axis: RankAxis):
        import jax

        return partition.blocks(self.group, jax.lax.axis_size(axis.name), f"ops.{self.name}")

    def _group_size(self, axis: RankAxis, blocks) -> int:
        return collectives.group_size(axis, blocks)

    def _need_rank(self, x: Any, minimum: int, what: str) -> None:
        if len(getattr(x, "shape", ())) < minimum:
            raise CommunicationError(f"ops.{self.name} ('{self.instance_name}'): {what}, got an input of shape "
                                     f"{tuple(getattr(x, 'shape', ()))}")


def _check_op(api: str, op: Any) -> str:
    if op not in _OPS:
        raise CommunicationError(f"ops.{api}(op={op!r}): valid: ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, "
                                 "ReduceOp.PROD")
    return op


class AllReduce(Collective):
    """``AllReduce(op=ReduceOp.SUM, group=GlobalComm.WORLD_COMM_GROUP)``: every rank gets the group's reduction."""

    def __init__(self, op: str = ReduceOp.SUM, group: str | None = None) -> None:
        super().__init__(group, op=_check_op("AllReduce", op))
        self.op = op

    def compute(self, x: Any) -> Any:
        axis = self._rank_axis()
        return collectives.all_reduce(x, self.op, axis, self._blocks(axis))


class AllGather(Collective):
    """``AllGather(group=...)``: the group's inputs concatenated along dimension 0, in group-rank order."""

    def compute(self, x: Any) -> Any:
        axis = self._rank_axis()
        self._need_rank(x, 1, "AllGather concatenates along dimension 0, so its input needs at least one dimension")
        return collectives.all_gather(x, axis, self._blocks(axis))


class ReduceScatter(Collective):
    """``ReduceScatter(op=ReduceOp.SUM, group=...)``: the reduction split along dimension 0; rank i keeps chunk i."""

    def __init__(self, op: str = ReduceOp.SUM, group: str | None = None) -> None:
        super().__init__(group, op=_check_op("ReduceScatter", op))
        self.op = op

    def compute(self, x: Any) -> Any:
        axis = self._rank_axis()
        blocks = self._blocks(axis)
        size = self._group_size(axis, blocks)
        self._need_rank(x, 1, "ReduceScatter splits dimension 0, so its input needs at least one dimension")
        if x.shape[0] % size:
            raise CommunicationError(f"ops.ReduceScatter ('{self.instance_name}'): the first dimension of the input "
                                     f"({x.shape[0]}) must be divisible by the group size {size}")
        return collectives.reduce_scatter(x, self.op, axis, blocks)


class Broadcast(Collective):
    """``Broadcast(root_rank, group=...)``: every rank gets the input of (world) rank ``root_rank``.

    As in MindSpore the input is a tuple of tensors (a single tensor is accepted) and the output a tuple.
    """

    input_names = None

    def __init__(self, root_rank: int, group: str | None = None) -> None:
        if not isinstance(root_rank, int) or isinstance(root_rank, bool) or root_rank < 0:
            raise CommunicationError(f"ops.Broadcast(root_rank={root_rank!r}): root_rank must be an int >= 0")
        super().__init__(group, root_rank=root_rank)
        self.root_rank = root_rank

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and _is_tensor(args[0]):
            args = ((args[0],),)
        return super().__call__(*args)

    def compute(self, inputs: Any) -> tuple:
        axis = self._rank_axis()
        blocks = self._blocks(axis)
        import jax

        members = range(jax.lax.axis_size(axis.name)) if blocks is None else blocks[0]
        if self.root_rank not in members:
            raise CommunicationError(f"ops.Broadcast(root_rank={self.root_rank}, group={self.group!r}): the root "
                                     f"is not a rank of the group (ranks {list(members)})")
        return tuple(collectives.broadcast(x, self.root_rank, axis, blocks) for x in inputs)


class AlltoAll(Collective):
    """``AlltoAll(split_count, split_dim, concat_dim, group=...)``: split along ``split_dim`` into ``split_count``
    pieces, send piece j to group rank j, concatenate what arrives along ``concat_dim``."""

    def __init__(self, split_count: int, split_dim: int, concat_dim: int, group: str | None = None) -> None:
        for name, value in (("split_count", split_count), ("split_dim", split_dim), ("concat_dim", concat_dim)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise CommunicationError(f"ops.AlltoAll({name}={value!r}): expected an int")
        super().__init__(group, split_count=split_count, split_dim=split_dim, concat_dim=concat_dim)
        self.split_count, self.split_dim, self.concat_dim = split_count, split_dim, concat_dim

    def compute(self, x: Any) -> Any:
        axis = self._rank_axis()
        blocks = self._blocks(axis)
        size = self._group_size(axis, blocks)
        rank = len(x.shape)
        split_dim, concat_dim = self.split_dim % max(rank, 1), self.concat_dim % max(rank, 1)
        if self.split_count != size:
            raise CommunicationError(f"ops.AlltoAll ('{self.instance_name}'): split_count={self.split_count} must "
                                     f"equal the group size {size}")
        if not rank or x.shape[split_dim] % size:
            raise CommunicationError(f"ops.AlltoAll ('{self.instance_name}'): dimension {self.split_dim} of the "
                                     f"input shape {tuple(x.shape)} must be divisible by split_count={size}")
        return collectives.all_to_all(x, split_dim, concat_dim, axis, blocks)
