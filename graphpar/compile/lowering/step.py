"""The train step, composed from named parts: objective → gradient → gradient transform → optimizer update.

``TrainProgram`` builds :class:`StepParts` from its plan and optimizer and :func:`train_step` composes them into
the pure function XLA compiles. Each part is a plain function, so a feature replaces one part and keeps the rest:

* ``cast_params(params) -> params``: the parameters the objective sees (mixed precision casts them here);
* ``objective(params, rest, inputs) -> (objective, (loss, new_rest))``: the plan's objective of its planned graph;
* ``gradient(objective) -> fn``: ``jax.value_and_grad`` (gradient accumulation wraps it);
* ``transform_gradients(grads, params) -> grads``: identity (loss-scale unscaling, optimizer-state sharding);
* ``update(grads, opt_state, params) -> (new_params, opt_state)``: the optax update;
* ``loss_scale(opt_state) -> scale | None``: a factor on the objective read from the optimizer state (dynamic loss
  scaling, ``nn/loss_scale.py``); None leaves the objective untouched.

Gradients and parameters are dicts by MindSpore parameter name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import optax

from graphpar.compile.lowering.network_state import NetworkState


def _identity_params(params: Any) -> Any:
    return params


def _identity_grads(grads: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    return grads


def _no_loss_scale(opt_state: Any) -> Any:
    return None


def value_and_grad(objective: Callable[..., Any]) -> Callable[..., Any]:
    return jax.value_and_grad(objective, has_aux=True)


def optax_update(tx: optax.GradientTransformation) -> Callable[..., Any]:
    def update(grads: dict[str, Any], opt_state: Any, params: dict[str, Any]):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return update


@dataclass(frozen=True)
class StepParts:
    objective: Callable[[Any, Any, Any], Any]
    update: Callable[[dict, Any, dict], tuple[dict, Any]]
    gradient: Callable[[Callable[..., Any]], Callable[..., Any]] = value_and_grad
    transform_gradients: Callable[[dict, dict], dict] = _identity_grads
    cast_params: Callable[[Any], Any] = _identity_params
    loss_scale: Callable[[Any], Any] = _no_loss_scale


def train_step(parts: StepParts, ns: NetworkState) -> Callable[..., Any]:
    """``step(param_values, rest_values, opt_state, inputs) -> (param_values, rest_values, opt_state, loss)``."""
    names = ns.param_names()

    def step(pvals, rvals, opt_state, inputs):
        rest = ns.rest.unflatten(rvals)
        scale = parts.loss_scale(opt_state)

        def objective(params):
            value, aux = parts.objective(parts.cast_params(params), rest, inputs)
            return (value if scale is None else value * scale), aux

        (_, (loss, new_rest)), grads = parts.gradient(objective)(ns.params.unflatten(pvals))
        pdict = dict(zip(names, pvals))
        gdict = parts.transform_gradients(dict(zip(names, jax.tree.leaves(grads))), pdict)
        new, opt_state = parts.update(gdict, opt_state, pdict)
        return [new[n] for n in names], jax.tree.leaves(new_rest), opt_state, loss

    return step


def sink_loop(step: Callable[..., Any]) -> Callable[..., Any]:
    """The same step scanned over a stack of batches (one device call for ``sink_size`` steps)."""

    def sink(pvals, rvals, opt_state, stacked_inputs):
        def body(carry, inputs):
            p, r, o, loss = step(*carry, inputs)
            return (p, r, o), loss

        (p, r, o), losses = jax.lax.scan(body, (pvals, rvals, opt_state), list(stacked_inputs))
        return p, r, o, losses

    return sink
