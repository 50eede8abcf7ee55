"""``mindspore.ops.operations.comm_ops``: the collective primitives, re-exported from ``graphpar.ops.comm_ops``."""

from graphpar.ops.comm_ops import (  # noqa: F401
    AllGather, AllReduce, AlltoAll, Broadcast, ReduceOp, ReduceScatter)
from graphpar.ops.misc_ops import _VirtualDataset  # noqa: F401
