"""``MicroBatchInterleaved(network, interleave_num=2)``: MindSpore's multi-copy parallel wrapper.

MindSpore cuts each device's slice of every input into ``interleave_num`` copies along dimension 0, runs the wrapped
Cell on each copy and adds the outputs (its ``construct`` starts from 0.0 and ``Add``s each copy's output; the
multi-copy tutorial's losses are the sum of the copies' losses), so that one copy's communication overlaps the other
copy's computation. graphpar computes the same value: copy ``i`` holds, of every device's slice of the batch, the
``i``-th of its ``interleave_num`` parts (in the global view of SEMI_AUTO / AUTO the batch is first viewed as
``(devices splitting it, interleave_num, rows)``, so each copy stays split over the same devices and the copies cost
no redistribution); in STAND_ALONE, DATA_PARALLEL (whose graph is one device's) and with a full batch the copies are
the contiguous parts MindSpore's ``_MicroBatch`` cuts. The output is the sum of the copies' outputs: for a loss that
is a batch mean, ``interleave_num`` times the loss of the unwrapped Cell. Whether XLA overlaps one copy's
collectives with the other's computation is its scheduler's decision.
"""

from __future__ import annotations

from typing import Any

from graphpar import _context
from graphpar.communication.devices import job_devices
from graphpar.errors import CellError
from graphpar.nn.cell import Cell
from graphpar.ops import array_ops, math_ops


def _batch_split(index: int) -> int:
    """How many devices split dimension 0 of input ``index`` in the graph ``construct`` is traced for."""
    parallel = _context.current_parallel()
    if parallel.parallel_mode in (_context.ParallelMode.STAND_ALONE, _context.ParallelMode.DATA_PARALLEL):
        return 1
    if parallel.loads_full_batch:
        return 1
    strategy = parallel.dataset_strategy
    if isinstance(strategy, tuple):
        return int(strategy[index][0]) if index < len(strategy) and strategy[index] else 1
    return len(job_devices(parallel.device_num))


class MicroBatchInterleaved(Cell):
    """``MicroBatchInterleaved(network, interleave_num=2)``: the sum of ``network``'s outputs on ``interleave_num``
    interleaved copies of the batch (see the module docstring)."""

    def __init__(self, network: Cell, interleave_num: int = 2):
        super().__init__(auto_prefix=False)
        if not isinstance(network, Cell):
            raise TypeError(f"MicroBatchInterleaved: network must be a Cell, got {type(network).__name__}")
        if isinstance(interleave_num, bool) or not isinstance(interleave_num, int) or interleave_num < 1:
            raise ValueError(f"MicroBatchInterleaved: interleave_num must be an int > 0, got {interleave_num!r}")
        self.network = network
        self.interleave_num = interleave_num
        self.reshape = array_ops.Reshape()
        self.strided_slice = array_ops.StridedSlice().add_prim_attr("strided_slice_flag", True)
        self.add = math_ops.Add().add_prim_attr("micro_interleaved_add_flag", True)

    def _copy(self, x: Any, index: int, copy: int) -> Any:
        k = self.interleave_num
        devices = _batch_split(index)
        rows = x.shape[0]
        if rows % (devices * k):
            raise CellError(f"MicroBatchInterleaved(interleave_num={k}): input {index} has {rows} rows, split over "
                            f"{devices} device(s): {rows // devices if rows % devices == 0 else rows / devices} per "
                            f"device, which {k} copies do not divide. Use a batch size divisible by {devices * k}")
        rest = tuple(x.shape[1:])
        grouped = self.reshape(x, (devices, k, rows // (devices * k)) + rest)
        begin, end = (0, copy) + (0,) * (len(rest) + 1), (devices, copy + 1, rows // (devices * k)) + rest
        part = self.strided_slice(grouped, begin, end, (1,) * (len(rest) + 3))
        return self.reshape(part, (rows // k,) + rest)

    def construct(self, *inputs: Any) -> Any:
        output = None
        for copy in range(self.interleave_num):
            args = tuple(self._copy(x, i, copy) for i, x in enumerate(inputs))
            out = self.network(*args)
            output = out if output is None else self.add(output, out)
        return output
