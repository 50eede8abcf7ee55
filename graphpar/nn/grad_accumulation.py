"""``GradAccumulation(network, micro_size)``: MindSpore's gradient accumulation wrapper.

MindSpore 2.x spells it ``mindspore.parallel.nn.GradAccumulation`` (and, deprecated, ``nn.GradAccumulationCell``):
the wrapped loss network runs on ``micro_size`` slices of the batch and the wrapper returns the *sum* of their
losses, so the gradient is the sum of the micro-batches' gradients and the optimizer steps once per batch.

Called directly (eagerly, or inside another traced Cell) it does exactly that. Under ``TrainOneStepCell`` /
``Model`` the compiled train program recognises it and runs the micro-batches in a ``lax.scan`` that accumulates
each device's *local* gradients and reduces them across devices once per step (``compile.accumulate``).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from graphpar.nn.cell import Cell


def _check_micro_size(owner: str, micro_size: Any) -> int:
    if not isinstance(micro_size, int) or isinstance(micro_size, bool):
        raise TypeError(f"{owner}: micro_size must be an int, got {type(micro_size).__name__}")
    if micro_size <= 0:
        raise ValueError(f"{owner}: micro_size must be > 0, got {micro_size}")
    return micro_size


def split_micro(x: Any, micro_size: int, index: int, owner: str = "GradAccumulation") -> Any:
    """The ``index``-th of ``micro_size`` equal slices of ``x`` along dimension 0 (scalars pass through)."""
    if np.ndim(x) == 0:
        return x
    n = np.shape(x)[0]
    if n % micro_size:
        raise ValueError(f"{owner}: an input of batch size {n} cannot be split into micro_size={micro_size} equal "
                         f"micro-batches; use a batch size that is a multiple of {micro_size}")
    size = n // micro_size
    return x[index * size:(index + 1) * size]


class GradAccumulation(Cell):
    """``GradAccumulation(network, micro_size)``: ``network``'s loss summed over ``micro_size`` micro-batches."""

    def __init__(self, network: Cell, micro_size: int):
        super().__init__(auto_prefix=False)
        if not isinstance(network, Cell):
            raise TypeError(f"GradAccumulation: network must be a Cell, got {type(network).__name__}")
        self.network = network
        self.micro_size = _check_micro_size("GradAccumulation", micro_size)

    def construct(self, *inputs: Any) -> Any:
        total = None
        for i in range(self.micro_size):
            loss = self.network(*(split_micro(x, self.micro_size, i) for x in inputs))
            total = loss if total is None else total + loss
        return jnp.asarray(total)


class GradAccumulationCell(GradAccumulation):
    """MindSpore's older name (``nn.GradAccumulationCell``, deprecated there in favour of ``GradAccumulation``)."""


def unwrap_accumulation(network: Cell, context_steps: int = 1) -> tuple[Cell, int]:
    """The loss network the train step traces and the number of micro-batches per step.

    A ``GradAccumulation`` wrapper gives its ``micro_size``; otherwise the context's ``grad_accumulation_step``
    (MindSpore 1.x) applies to the whole network.
    """
    if isinstance(network, GradAccumulation):
        return network.network, network.micro_size
    return network, context_steps
