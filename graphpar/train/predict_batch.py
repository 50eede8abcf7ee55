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
plan that draws one batch (stand-alone, one device) the data is the global batch, unchanged. A tuple
``dataset_strategy`` says how each input is split: the given input is one block, and the global input is the
blocks together (here: the given one tiled by the splits).
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
from graphpar.errors import ConfigError


def _batch_like(x: Any) -> bool:
    return isinstance(x, (np.ndarray, jax.Array)) and np.ndim(x) >= 1


@dataclass(frozen=True)
class RankBatches:
    """The global inputs of one predict call, and where this rank's rows are in its outputs."""

    inputs: tuple
    rows: int | None = None  # the given batch's rows (None: the data is the global batch)
    global_rows: int = 0  # the global batch's rows
    start: int = 0  # where this process's first rank's rows begin in them

    def rank_rows(self, outputs: Any) -> Any:
        """This process's first rank's rows of each output laid out along the global batch (every output whole when the
        data was the global batch)."""
        if self.rows is None:  # the global batch: outputs spanning processes come back whole, readable here
            return jax.tree.map(lambda out: to_host(out) if isinstance(out, jax.Array) and not
                                out.is_fully_addressable else out, outputs)
        rows, start = self.rows, self.start

        def cut(out: Any) -> Any:
            if not _batch_like(out) or np.shape(out)[0] != self.global_rows:
                return out
            if isinstance(out, jax.Array) and not out.is_fully_addressable:
                return to_host(out)[start:start + rows]
            return out[start:start + rows]

        return jax.tree.map(cut, outputs)


def _tiled(predict_data: Sequence[Any], strategy: tuple) -> RankBatches:
    """A tuple ``dataset_strategy``: input ``k`` is one rank's block of a global input split ``strategy[k]`` ways
    per dimension (MindSpore's global shape is the block's times the splits); every rank here gets the same block,
    so the global input is the block tiled by the splits, and rank 0's rows are the first block's."""
    arrays = [x for x in predict_data if isinstance(x, (np.ndarray, jax.Array))]
    if len(arrays) != len(strategy) or any(len(s) != np.ndim(x) for s, x in zip(strategy, arrays)):
        return RankBatches(tuple(predict_data))  # the planner refuses the mismatch by name
    if jax.process_count() > 1:
        raise ConfigError("Model.predict", "dataset_strategy", strategy,
                          reason="a tuple dataset_strategy in a multi-process job: each process would have to give "
                                 "its ranks' blocks, which one Tensor cannot say",
                          valid=["data_parallel", "full_batch"])
    splits = iter(strategy)
    inputs = tuple(np.tile(np.asarray(x), next(splits)) if isinstance(x, (np.ndarray, jax.Array)) else x
                   for x in predict_data)
    first = arrays[0]
    if np.ndim(first) < 1:
        return RankBatches(inputs)
    rows = int(np.shape(first)[0])
    return RankBatches(inputs, rows, rows * int(strategy[0][0]), 0)


def rank_batches(plan: ExecutionPlan, predict_data: Sequence[Any]) -> RankBatches:
    """``predict_data`` as the rank's batch (see the module doc): the global inputs the plan takes."""
    pctx = _context.current_parallel()
    draws = 1 if pctx.loads_full_batch else plan.draws
    if isinstance(pctx.dataset_strategy, tuple) and draws > 1:
        return _tiled(predict_data, pctx.dataset_strategy)
    batches = [x for x in predict_data if _batch_like(x)]
    if draws <= 1 or not batches:
        return RankBatches(tuple(predict_data))
    inputs = tuple(np.concatenate([np.asarray(x)] * draws, axis=0) if _batch_like(x) else x for x in predict_data)
    rows = int(np.shape(batches[0])[0])
    return RankBatches(inputs, rows, rows * draws * jax.process_count(), plan.first_rank * rows)
