"""The compiled body of a functional step: the user's step function run on the program's arguments.

``functional_step`` is what ``runtime.program.TrainProgram._step`` is for ``Model.train``:
``step(param_values, rest_values, opt_state, inputs) -> (param_values, rest_values, opt_state, outputs)``. Inside,
the Parameters and other state of the step's Cells hold the arguments (``objective.lent``), the optimizer holds the
optimizer state, and the step function runs as written. Its gradient call is answered by :class:`InStep`: the
gradient of the plan's objective of the *planned* graph, composed as ``compile.lowering.step.train_step`` composes
``Model.train``'s (``jax.value_and_grad`` of the objective over the trainable parameters, the new statistics kept);
a call of the differentiated Cell on the same arguments before the gradient call (MindSpore 1.x's
``loss = self.network(*inputs)`` then ``GradOperation``) is answered by that same computation, as MindSpore's
compiler merges the two forwards; its ``optimizer(grads)`` runs the optimizer's own update (``Optimizer.construct``: the optax transformation
``Model.train`` applies) on the lent state. What the Variables and the optimizer hold at the end is the step's new
state.

With ``has_aux`` the differentiated function's auxiliary outputs (logits) are not part of the planned graph (it
returns the loss, as ``Model.train``'s does): they come from the function's forward graph, planned on the same mesh
and evaluated outside the gradient; XLA removes it when the step does not use them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from graphpar.compile.functional.capture import CapturedStep
from graphpar.compile.functional.objective import lent, lent_optimizer_state, read
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.lowering.step import value_and_grad
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.planned import Planned
from graphpar.errors import JitError
from graphpar.ops.composite import Differentiation, tracing_step


class InStep:
    """The :class:`~graphpar.ops.composite.StepTrace` of the compiled step (see the module docstring)."""

    def __init__(self, plan: ExecutionPlan, planned: Planned, ns: NetworkState, captured: CapturedStep,
                 rest_vars: Sequence[nnx.Variable | None], rvals: Sequence[Any], gradient: Callable[..., Any],
                 aux_planned: Planned | None):
        self.plan, self.planned, self.ns, self.captured = plan, planned, ns, captured
        self.aux_planned = aux_planned
        self.gradient = gradient
        self.rest_vars, self.rvals = rest_vars, rvals
        self._computed: tuple[tuple, tuple] | None = None  # a forward call answered with the gradient (forward)

    def differentiate(self, spec: Differentiation, args: tuple, sens: Any) -> tuple[Any, tuple, tuple]:
        captured = self.captured
        if not same_gradient(spec, captured.spec):
            raise JitError(captured.name, f"the step took the gradient of '{captured.spec.name}' when it was "
                           f"captured and of '{spec.name}' now; a compiled step differentiates one function")
        computed, self._computed = self._computed, None
        if computed is None or len(computed[0]) != len(args) or any(a is not b for a, b in zip(computed[0], args)):
            return self._value_and_grad(spec, args, sens)
        value, g_w, g_x = computed[1]
        if sens is not None:  # the forward was differentiated with ones: a scalar loss's gradients scale with sens
            g_w, g_x = tuple(g * sens for g in g_w), tuple(g * sens for g in g_x)
        return value, g_w, g_x

    def computes(self, cell: Any, args: tuple, kwargs: dict) -> bool:
        spec = self.captured.spec
        return (cell is spec.fn and not kwargs and not spec.has_aux and self._computed is None
                and [(jnp.shape(a), jnp.result_type(a)) for a in args]
                == [(tuple(a.shape), a.dtype) for a in self.captured.graph_avals])

    def forward(self, cell: Any, args: tuple, kwargs: dict) -> Any:
        result = self._value_and_grad(self.captured.spec, args, None)
        self._computed = (args, result)
        return result[0]

    def _value_and_grad(self, spec: Differentiation, args: tuple, sens: Any) -> tuple[Any, tuple, tuple]:
        """The gradient of the plan's objective of the planned graph at the step's current state."""
        ns, plan, planned = self.ns, self.plan, self.planned
        params = ns.params.unflatten(read(ns.params.holders))
        rest = ns.rest.unflatten([v if h is None else h._raw_value for h, v in zip(self.rest_vars, self.rvals)])
        scale = 1.0 if sens is None else sens
        inputs = list(args)
        if spec.positions:
            def objective(params, xs):
                full = list(inputs)
                for p, x in zip(spec.positions, xs):
                    full[p] = x
                return plan.objective(planned, ns, params, rest, full, scale)

            (_, (loss, new_rest)), (grads, g_x) = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)(
                params, [inputs[p] for p in spec.positions])
        else:
            def objective(params):
                return plan.objective(planned, ns, params, rest, inputs, scale)

            (_, (loss, new_rest)), grads = self.gradient(objective)(params)
            g_x = []
        for var, value in zip(self.rest_vars, jax.tree.leaves(new_rest)):
            if var is not None:
                object.__setattr__(var, "_raw_value", value)
        by_name = dict(zip(ns.param_names(), jax.tree.leaves(grads)))
        g_w = tuple(by_name[w.name] for w in spec.weights)
        value = (loss,) + self._auxiliary(params, rest, inputs) if spec.has_aux else loss
        return value, g_w, tuple(g_x)

    def _auxiliary(self, params: Any, rest: Any, inputs: list) -> tuple:
        """A ``has_aux`` function's auxiliary outputs: its forward graph (``program.FunctionalProgram.aux_planned``)
        evaluated on the step's state before the update, outside the gradient. XLA drops it when the step does not
        use them (the docs' ``(loss, _), grads = grad_fn(...)``)."""
        if self.aux_planned is None:  # no array among them (None, a constant): the values captured
            return jax.tree.unflatten(jax.tree.structure(self.captured.aux_avals), [])
        outputs, _ = self.plan.forward(self.aux_planned, self.ns, params, rest, inputs)
        return tuple(jax.lax.stop_gradient(outputs))


def returns_nothing(captured: CapturedStep) -> bool:
    """Whether the step function returns no array (its compiled step then returns a scalar marker instead)."""
    return not jax.tree.leaves(captured.out_avals)


def same_gradient(a: Differentiation, b: Differentiation | None) -> bool:
    """The same gradient call (Parameters compared by identity: ``==`` on a Parameter compares values)."""
    return (b is not None and a.fn is b.fn and a.positions == b.positions and a.has_aux == b.has_aux
            and len(a.weights) == len(b.weights) and all(x is y for x, y in zip(a.weights, b.weights)))


def functional_step(plan: ExecutionPlan, planned: Planned, ns: NetworkState, captured: CapturedStep,
                    aux_planned: Planned | None, gradient: Callable[..., Any] = value_and_grad):
    """The step function XLA compiles (see the module docstring); ``aux_planned``: the forward graph of a
    ``has_aux`` function's auxiliary outputs (None: it has none with arrays); ``gradient``: the gradient part of
    ``compile.lowering.step.StepParts`` (the parallel optimizer's, which gathers the stored parameters)."""
    params = ns.params.holders
    rest_vars = [h if isinstance(h, nnx.Variable) else None for h in ns.rest.holders]
    lent_rest = [h for h in rest_vars if h is not None]
    optimizer = captured.optimizer
    marker = returns_nothing(captured)

    def step(pvals, rvals, opt_state, inputs):
        trace = InStep(plan, planned, ns, captured, rest_vars, rvals, gradient, aux_planned)
        rest_values = [v for v, h in zip(rvals, rest_vars) if h is not None]
        with lent(list(params) + lent_rest, list(pvals) + rest_values), \
                lent_optimizer_state([optimizer], [opt_state]), tracing_step(trace):
            out = captured.fn(*inputs)
            new_p = read(params)
            new_r = [v if h is None else h._raw_value for v, h in zip(rvals, rest_vars)]
            new_o = optimizer._box.state
        if marker:  # nothing returned: a scalar stands for the step (runtime.bound_step waits on an output)
            return new_p, new_r, new_o, jnp.zeros((), jnp.int32)
        return new_p, new_r, new_o, out

    return step
