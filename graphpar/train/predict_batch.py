"""``Model.predict``'s input in parallel modes: this rank's batch, as MindSpore takes it.

MindSpore runs one process per device and each calls ``model.predict(data)`` with its own data: without
``full_batch`` (``dataset_strategy="data_parallel"``, and always in DATA_PARALLEL) the Tensor is that rank's slice
of the global batch, which is the ranks' slices together (``_to_full_tensor``). graphpar drives several ranks from
one process, and feeds them as ``Model.train`` feeds an unsharded dataset (``train.feeding``): every rank this process
drives gets the given batch, so the global batch is the batch repeated once per local rank (in a multi-process job,
the processes' rows together), and the plan splits it as its strategies say. What comes back is what this
process's first rank computes for its own rows: each output whose first dimension is the global batch is cut to
those rows (so a batch-1 predict under batch-splitting strategies gives stand-alone's output); other outputs
(a reduction over the batch, say) are the global value, as every MindSpore rank gets it. With ``full_batch`` or a
plan that draws one batch (stand-alone, one device) the data is the global batch, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from graphpar import _context
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.global_batch import to_host


def _batch_like(x: Any) -> bool:
    return isinstance(x, (np.ndarray, jax.Array)) and np.ndim(x) >= 1


@dataclass(frozen=True)
class RankBatches:
    """The global inputs of one predict call, and how to find this rank's rows in its outputs."""

    inputs: tuple
    rows: int | None = None  # the given batch's rows (None: the data is the global batch)
    draws: int = 1
    first_rank: int = 0

    def rank_rows(self, outputs: Any) -> Any:
        """This process's first rank's rows of each output laid out along the global batch."""
        if self.rows is None:
            return outputs
        rows, start = self.rows, self.first_rank * self.rows
        global_rows = rows * self.draws * jax.process_count()

        def cut(out: Any) -> Any:
            if not _batch_like(out) or np.shape(out)[0] != global_rows:
                return out
            if isinstance(out, jax.Array) and not out.is_fully_addressable:
                return to_host(out)[start:start + rows]
            return out[start:start + rows]

        return jax.tree.map(cut, outputs)


def rank_batches(plan: ExecutionPlan, predict_data: Sequence[Any]) -> RankBatches:
    """``predict_data`` as the rank's batch (see the module doc): the global inputs the plan takes."""
    draws = 1 if _context.current_parallel().loads_full_batch else plan.draws
    batches = [x for x in predict_data if _batch_like(x)]
    if draws <= 1 or not batches:
        return RankBatches(tuple(predict_data))
    inputs = tuple(np.concatenate([np.asarray(x)] * draws, axis=0) if _batch_like(x) else x for x in predict_data)
    return RankBatches(inputs, int(np.shape(batches[0])[0]), draws, plan.first_rank)
