"""The gradient reducers of MindSpore's functional training loop: ``DistributedGradReducer``, ``PipelineGradReducer``.

In MindSpore each device differentiates the loss of its own slice of the batch and ``DistributedGradReducer`` then
AllReduces the gradients over the devices: their sum ``S``, divided by ``degree`` (default: the group size) when
``mean`` (default: ``gradients_mean``). In graphpar a step is one SPMD program over the global batch and the gradient
it hands the step function is already reduced, by XLA, the way ``Model.train`` reduces it (``architecture.md``,
*Execution plans*). Reducing again would double-count, so the reducer only rescales that gradient to what
MindSpore's reducer returns:

* inside a compiled step (``ms.jit``, ``AutoParallel``: the gradients are traced values) the gradient is the plan's:
  in DATA_PARALLEL the sum of the per-device gradients, divided by the device count ``N`` with
  ``gradients_mean=True``; in SEMI_AUTO / AUTO / HYBRID the gradient of the global loss, i.e. ``S / N`` for a loss
  that is a batch mean;
* eagerly (concrete arrays: a loop run without ``ms.jit``) it is the gradient of the loss of the whole batch this
  process holds, computed on one device: ``S / N`` likewise;
* in STAND_ALONE there is one device, ``N = 1``.

The reducer returns ``S / degree`` when ``mean`` and ``S`` otherwise. With MindSpore's defaults in DATA_PARALLEL it
is the identity inside a compiled step, as it must be. An eager loop in a job of several processes cannot reduce
over the others without a program (each process only has its own gradient): refused by name, with ``ms.jit`` as the
way. ``fusion_type`` is said once to be XLA's business (its all-reduce combiner merges the reductions); groups
other than the world are refused.

``PipelineGradReducer(parameters, scale_sense=1.0, opt_shard=None)`` ends MindSpore's functional pipeline step
(``loss, grads = grad_fn(x, y); grads = pp_grad_reducer(grads); optimizer(grads)`` over an ``nn.PipelineCell``). In
MindSpore the compiled pipeline adds each micro-batch's gradients into accumulation buffers (its ``accu_grads``,
zeros like ``parameters``), and the reducer returns those sums times ``1 / scale_sense`` and zeroes the buffers
(with ``opt_shard``, the optimizer shard's reduced gradient, scaled alike). In graphpar the gradient the step hands
the reducer is already that sum: the PipelineCell's loss is the sum of the micro-batches' losses, and a pipelined
step (``compile.functional.pipelined``) accumulates each stage's gradients over the micro-batches, as
``Model.train``'s does; so the reducer returns ``grads * (1 / scale_sense)`` (the identity for 1.0), in every mode
and with or without the parallel optimizer, and there are no buffers to zero. ``opt_shard`` only chooses where
MindSpore reads the sum from: a value other than the context's ``enable_parallel_optimizer`` is said once to change
nothing.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from graphpar import _context
from graphpar._logging import notice_once
from graphpar.communication.backend import WORLD_GROUP_NAMES
from graphpar.communication.devices import job_devices
from graphpar.errors import CellError, ParallelModeError
from graphpar.nn.cell import Cell


def _data_parallel_size() -> int:
    parallel = _context.current_parallel()
    if parallel.parallel_mode == _context.ParallelMode.STAND_ALONE:
        return 1
    return len(job_devices(parallel.device_num))


class DistributedGradReducer(Cell):
    """``DistributedGradReducer(parameters, mean=None, degree=None, fusion_type=1, group=GlobalComm.WORLD_COMM_GROUP)``:
    ``grad_reducer(grads)`` returns the gradients MindSpore's reducer returns (see the module docstring)."""

    def __init__(self, parameters: Any, mean: bool | None = None, degree: int | None = None, fusion_type: int = 1,
                 group: str | None = None):
        super().__init__(auto_prefix=False)
        mode = _context.current_parallel().parallel_mode
        if _context.current().mode == _context.GRAPH_MODE and mode in (_context.ParallelMode.SEMI_AUTO_PARALLEL,
                                                                      _context.ParallelMode.AUTO_PARALLEL):
            # MindSpore's DistributedGradReducer._check_parallel_mode
            raise ParallelModeError("DistributedGradReducer", mode, "MindSpore refuses it in GRAPH_MODE: the planned "
                                    "network's gradients are already reduced by its plan. Leave the reducer out "
                                    "(TrainOneStepCell / Model.train reduce them), or build it in PYNATIVE_MODE "
                                    "or in 'data_parallel' / 'stand_alone'")
        if mean is not None and not isinstance(mean, bool):
            raise TypeError(f"DistributedGradReducer: mean must be a bool or None, got {mean!r}")
        if degree is not None and (isinstance(degree, bool) or not isinstance(degree, int) or degree < 1):
            raise ValueError(f"DistributedGradReducer: degree must be an int >= 1 (the devices the mean divides by), "
                             f"got {degree!r}")
        if group is not None and group not in WORLD_GROUP_NAMES:
            raise CellError(f"DistributedGradReducer(group={group!r}): reducing over a sub-group is not built; the "
                            "gradients of graphpar's step are reduced over the step's data-parallel devices. Leave "
                            f"group at the world group ({', '.join(WORLD_GROUP_NAMES)})")
        if fusion_type != 1:
            notice_once("grad-reducer:fusion", f"DistributedGradReducer(fusion_type={fusion_type!r}): XLA's "
                                               "all-reduce combiner decides how gradient reductions are fused")
        self.parameter_count = len(list(parameters))
        self.mean = mean
        self.degree = degree

    def factor(self, traced: bool) -> float:
        """What the step's gradient is multiplied by (``traced``: inside a compiled step)."""
        parallel = _context.current_parallel()
        devices = _data_parallel_size()
        mean = parallel.gradients_mean if self.mean is None else self.mean
        degree = devices if self.degree is None else self.degree
        in_sum = (traced and parallel.parallel_mode == _context.ParallelMode.DATA_PARALLEL
                  and not parallel.gradients_mean)
        total = 1.0 if in_sum else float(devices)  # the incoming gradient is S, or S / devices
        return total / degree if mean else total

    def __call__(self, grads: Any) -> Any:
        """Run as written, never as a compiled program of its own: it only rescales the gradients of the step it
        is called in (a GRAPH_MODE top-level Cell call would compile it, and see its inputs as traced values)."""
        return self.construct(grads)

    def construct(self, grads: Any) -> Any:
        leaves = jax.tree.leaves(grads)
        traced = any(isinstance(g, jax.core.Tracer) for g in leaves)
        if not traced and jax.process_count() > 1 and _data_parallel_size() > 1:
            raise CellError("DistributedGradReducer: called outside a compiled step in a job of "
                            f"{jax.process_count()} processes: each process holds only its own gradient and there is "
                            "no program to reduce it in. Compile the step: decorate train_step with @ms.jit (or wrap "
                            "it in AutoParallel), and the reduction is part of its plan")
        if not traced and _data_parallel_size() > 1:
            notice_once("grad-reducer:eager", "DistributedGradReducer outside a compiled step: the gradient was taken "
                        "over the whole batch on one device, and graphpar reads it as a batch-mean loss's (the "
                        "per-device gradients' sum divided by the device count). For a loss that sums over the batch "
                        "that is device-count times MindSpore's reduced gradient; compile the step (@ms.jit or "
                        "AutoParallel) for the per-device reduction of any loss")
        factor = self.factor(traced)
        if factor == 1.0:
            return grads
        return jax.tree.map(lambda g: g * jnp.asarray(factor, jnp.result_type(g)), grads)


class PipelineGradReducer(Cell):
    """``PipelineGradReducer(parameters, scale_sense=1.0, opt_shard=None)``: ``pp_grad_reducer(grads)`` returns the
    micro-batches' accumulated gradients times ``1 / scale_sense`` (see the module docstring)."""

    def __init__(self, parameters: Any, scale_sense: float = 1.0, opt_shard: bool | None = None):
        super().__init__(auto_prefix=False)
        if isinstance(scale_sense, bool) or not isinstance(scale_sense, (int, float)) or not scale_sense > 0:
            raise ValueError(f"PipelineGradReducer: scale_sense must be a number > 0 (the gradients are divided by "
                             f"it), got {scale_sense!r}")
        if opt_shard is not None and not isinstance(opt_shard, bool):
            raise TypeError(f"PipelineGradReducer: opt_shard must be a bool or None, got {opt_shard!r}")
        parallel_optimizer = _context.current_parallel().enable_parallel_optimizer
        if opt_shard is not None and opt_shard != parallel_optimizer:
            notice_once("pipeline-grad-reducer:opt_shard", f"PipelineGradReducer(opt_shard={opt_shard}) with "
                        f"enable_parallel_optimizer={parallel_optimizer}: graphpar hands the reducer the "
                        "micro-batches' accumulated gradients either way, so opt_shard changes nothing")
        self.parameter_count = len(list(parameters))
        self.scale_sense = float(scale_sense)
        self.opt_shard = parallel_optimizer if opt_shard is None else opt_shard

    def __call__(self, grads: Any) -> Any:
        """Run as written (like :class:`DistributedGradReducer`): it scales the gradients of the step it is called
        in, traced or concrete (a pipelined step runs its code between the gradient and the update eagerly)."""
        return self.construct(grads)

    def construct(self, grads: Any) -> Any:
        count = len(jax.tree.leaves(grads))
        if count != self.parameter_count:
            raise ValueError(f"PipelineGradReducer: got {count} gradients for the {self.parameter_count} parameters "
                             "it was made for; pass the gradients of those parameters (optimizer.parameters)")
        if self.scale_sense == 1.0:
            return grads
        return jax.tree.map(lambda g: g * jnp.asarray(1.0 / self.scale_sense, jnp.result_type(g)), grads)
