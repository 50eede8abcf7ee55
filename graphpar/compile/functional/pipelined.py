"""A functional step over an ``nn.PipelineCell`` with ``pipeline_stages > 1``: MindSpore's pipeline tutorial loop.

MindSpore 2.x writes pipeline training as a step function::

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)   # forward_fn returns net_with_loss(...)

    @ms.jit
    def train_one_step(inputs, target):
        loss, grads = grad_fn(inputs, target)
        grads = pp_grad_reducer(grads)          # nn.PipelineGradReducer: the micro-batches' accumulated gradients
        optimizer(grads)
        return loss, grads

A pipelined step is MPMD in graphpar (``compile.pipeline.program``: one program per stage on its own devices, run
by a schedule from Python), so it cannot be one traced program as :class:`~graphpar.compile.functional.program.
FunctionalProgram` is. :class:`PipelinedStep` runs the user's step function as written, with concrete values, and
answers its two engine calls with the halves of ``Model.train``'s pipelined step (the same ``PipelineProgram``:
its plan, stage programs, schedules and dumps):

* the gradient call (``value_and_grad`` / ``grad`` / ``GradOperation`` of a function returning the PipelineCell's
  loss; the capture checks that form, ``capture.PipelineCall``) is :meth:`PipelineProgram.gradients`: the schedule
  walked, the loss (the sum over micro-batches) and each Parameter's gradient accumulated over the micro-batches,
  on its stage's devices;
* ``optimizer(grads)`` is :meth:`PipelineProgram.apply` with the gradients it is given (each put on the devices of
  every stage using its Parameter), so what the step did to them in between (``PipelineGradReducer``'s scale)
  is what the stages' updates apply.

Code between the two runs eagerly on the gradients (each on its own stage's devices). The update does not take the
gradients' buffers, so the step may return them. A step that skips the optimizer (a Python ``if``) keeps the
Parameters and the optimizer state as they were. One process drives every stage here; a multi-process job is
refused by name (``Model.train`` pipelines across processes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from graphpar.compile.functional.capture import CapturedStep
from graphpar.compile.functional.step import same_gradient
from graphpar.compile.pipeline.program import PipelineProgram, StepGradients
from graphpar.errors import JitError
from graphpar.nn.cell import Cell
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.nn.pipeline_cell import PipelineError
from graphpar.ops.composite import Differentiation, tracing_step


@dataclass(frozen=True)
class _Training:
    """What ``PipelineProgram`` trains (a ``TrainOneStepCell``'s parts): the PipelineCell, the step's optimizer
    and the loss sensitivity (1: a functional step scales its gradients itself)."""

    network: Cell
    optimizer: Optimizer
    sens: float = 1.0


def pipeline_problem(captured: CapturedStep, stages: int) -> str | None:
    """Why ``captured`` cannot run pipelined over ``stages`` stages (None: it can)."""
    spec = captured.spec
    if captured.pipeline is None:
        return (f"pipeline_stages={stages} pipelines an nn.PipelineCell, and {spec.origin} of '{spec.name}' calls "
                "none; differentiate a function returning the loss of nn.PipelineCell(nn.WithLossCell(net, loss_fn), "
                "micro_size), or set pipeline_stages=1")
    if captured.pipeline.problem is not None:
        return captured.pipeline.problem
    if jax.process_count() > 1:
        return (f"a functional pipelined step in a job of {jax.process_count()} processes is not built (one "
                "process drives every stage); train the pipeline with Model.train or nn.TrainOneStepCell, which "
                "pipeline across processes")
    return None


class PipelinedStep:
    """The compiled form of a pipelined functional step (see the module docstring): ``run_step`` as a
    ``FunctionalProgram``'s, ``program`` the ``PipelineProgram`` whose halves answer the step's calls."""

    def __init__(self, captured: CapturedStep, stages: int):
        problem = pipeline_problem(captured, stages)
        if problem is not None:
            raise PipelineError(f"step function '{captured.name}'", problem)
        self.captured = captured
        self.program = PipelineProgram(_Training(captured.pipeline.cell, captured.optimizer), keep_gradients=True)

    @property
    def counts(self) -> Any:
        return self.program.counts

    def run_step(self, inputs: Sequence[Any]) -> Any:
        """One call of the step function on ``inputs``: what it returns (its Parameters and optimizer updated)."""
        trace = _PipelinedCall(self.program, self.captured)
        with tracing_step(trace):
            out = self.captured.fn(*inputs)
        trace.finish()
        return out


class _PipelinedCall:
    """The :class:`~graphpar.ops.composite.StepTrace` of one call of a pipelined step: the gradient call answered
    by the pipeline's gradients, the optimizer's call by its updates (module docstring)."""

    def __init__(self, program: PipelineProgram, captured: CapturedStep):
        self.program, self.captured = program, captured
        self.pending: StepGradients | None = None  # gradients taken, not yet applied

    def differentiate(self, spec: Differentiation, args: tuple, sens: Any) -> tuple[Any, tuple, tuple]:
        captured = self.captured
        if not same_gradient(spec, captured.spec):
            raise JitError(captured.name, f"the step took the gradient of '{captured.spec.name}' when it was "
                           f"captured and of '{spec.name}' now; a compiled step differentiates one function")
        if self.pending is not None:
            raise JitError(captured.name, "the step takes a second gradient before optimizer(grads); a pipelined "
                           "step takes one gradient and applies it once")
        self.pending = step = self.program.gradients(list(args))
        first = {}  # name -> the gradient of the first stage (chunk) using it (copies of a shared one are equal)
        names = self.program.state.param_names()
        for st, grads in zip(step.built.stages, step.grads):
            for i, g in zip(st.sg.params, grads or ()):
                first.setdefault(names[i], g)
        g_w = tuple(first[w.name] for w in spec.weights)
        if sens is not None:  # GradOperation(sens_param=True): the gradient of sens * loss (a host value, so it
            scale = np.asarray(jax.device_get(sens))  # multiplies a gradient on any stage's devices)
            g_w = tuple(g * scale.astype(g.dtype) for g in g_w)
        return step.loss, g_w, ()

    def computes(self, cell: Any, args: tuple, kwargs: dict) -> bool:
        return cell is self.captured.optimizer

    def forward(self, cell: Any, args: tuple, kwargs: dict) -> Any:
        """``optimizer(grads)``: each stage updated with ``grads`` (in the order of ``optimizer.parameters``)."""
        name, optimizer = self.captured.name, self.captured.optimizer
        if kwargs or len(args) != 1:
            raise JitError(name, f"{type(cell).__name__} is called with {len(args)} argument(s) and keywords "
                           f"{sorted(kwargs)}; call it with the gradients only: optimizer(grads)")
        if self.pending is None:
            raise JitError(name, f"{type(cell).__name__}(grads) is called before the step's gradient call; take "
                           "the gradients first (loss, grads = grad_fn(...))")
        grads = list(args[0])
        if len(grads) != len(optimizer.parameters):
            raise ValueError(f"{type(optimizer).__name__}: got {len(grads)} gradients for "
                             f"{len(optimizer.parameters)} parameters")
        by_name = {p.name: g for p, g in zip(optimizer.parameters, grads)}
        step, self.pending = self.pending, None
        names = self.program.state.param_names()
        per_stage = [None if g is None else [_placed(by_name[names[i]], st.param_sh[i]) for i in st.sg.params]
                     for st, g in zip(step.built.stages, step.grads)]
        self.program.apply(step, per_stage)
        return True

    def finish(self) -> None:
        """After the step function: gradients it took but did not apply leave the Parameters and the optimizer
        state as they were (the step's new network state, e.g. BatchNorm statistics, is kept)."""
        if self.pending is not None:
            step, self.pending = self.pending, None
            self.program.apply(step, None)


def _placed(g: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """``g`` on a stage's devices as its Parameter is laid out there (as it is when the step kept it there)."""
    if isinstance(g, jax.Array) and g.sharding.is_equivalent_to(sharding, g.ndim):
        return g
    return jax.device_put(g, sharding)
