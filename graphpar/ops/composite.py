"""Gradients the MindSpore way: ``ops.GradOperation`` and the functional ``grad`` / ``value_and_grad``.

``GradOperation(get_all, get_by_list, sens_param)(network, weights)(*inputs)`` differentiates a Cell with respect
to its inputs and/or a ParameterTuple: the Cell is split into pure state with flax NNX and re-merged inside
``jax.vjp``, so it works eagerly and inside a traced step alike. ``value_and_grad(fn, grad_position, weights,
has_aux)`` differentiates a plain function that closes over Cells: the weights' values are substituted for the
duration of the call (and always restored), which is the only way to reach Parameters held by an arbitrary closure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from graphpar.common.parameter import Parameter


def _swap(param: Parameter, value: Any) -> None:
    """Put a traced value into a Parameter created outside the trace, for the duration of one call (the caller
    restores it in a ``finally``, so the tracer never outlives the call). NNX refuses cross-trace mutation through
    its setters, so this writes the variable's value slot directly."""
    if not hasattr(param, "_raw_value"):  # pragma: no cover - guards a flax upgrade
        raise RuntimeError("graphpar.value_and_grad: this flax version stores Variable values differently; "
                           "use ops.GradOperation on a Cell instead")
    object.__setattr__(param, "_raw_value", value)


def _ones_like_tree(out: Any) -> Any:
    return jax.tree.map(jnp.ones_like, out)


class GradOperation:
    """MindSpore's ``GradOperation(get_all=False, get_by_list=False, sens_param=False)``."""

    def __init__(self, get_all: bool = False, get_by_list: bool = False, sens_param: bool = False):
        self.get_all, self.get_by_list, self.sens_param = get_all, get_by_list, sens_param

    def __call__(self, network: Any, weights: Sequence[Parameter] | None = None) -> Callable[..., Any]:
        if self.get_by_list and weights is None:
            raise TypeError("GradOperation(get_by_list=True)(network, weights): weights (a ParameterTuple) is "
                            "required")
        ids = [id(w) for w in (weights or ())]

        def grad_fn(*inputs: Any) -> Any:
            sens = inputs[-1] if self.sens_param else None
            xs = inputs[:-1] if self.sens_param else inputs
            graphdef, chosen, rest = nnx.split(network, lambda path, v: id(v) in ids, ...)
            order = {id(v): i for i, (_, v) in enumerate(nnx.to_flat_state(chosen))}
            missing = [w.name for w in (weights or ()) if id(w) not in order]
            if missing:
                raise ValueError(f"GradOperation: weights {missing} are not parameters of {type(network).__name__}")

            def f(chosen_state, xs):
                return nnx.merge(graphdef, chosen_state, rest)(*xs)

            out, vjp = jax.vjp(f, chosen, tuple(jnp.asarray(x) for x in xs))
            g_state, g_inputs = vjp(_ones_like_tree(out) if sens is None else sens)
            flat = [v for _, v in nnx.to_flat_state(g_state)]
            g_weights = tuple(flat[order[i]].get_value() if hasattr(flat[order[i]], "get_value")
                              else flat[order[i]] for i in ids)
            if self.get_by_list and self.get_all:
                return g_inputs, g_weights
            if self.get_by_list:
                return g_weights
            if self.get_all:
                return g_inputs
            return g_inputs[0]

        return grad_fn


def value_and_grad(fn: Callable[..., Any], grad_position: int | tuple[int, ...] | None = 0,
                   weights: Sequence[Parameter] | None = None, has_aux: bool = False) -> Callable[..., Any]:
    """MindSpore's ``value_and_grad``: returns ``(value, grads)``; grads are w.r.t. the inputs at
    ``grad_position`` and/or ``weights`` (``(inputs_grads, weights_grads)`` when both are asked). With
    ``has_aux`` the function returns ``(loss, *aux)``, only ``loss`` is differentiated, and the value is the
    whole tuple."""
    weights = list(weights or [])
    if grad_position is None and not weights:
        raise ValueError("value_and_grad: give grad_position, weights, or both")
    positions = () if grad_position is None else (
        (grad_position,) if isinstance(grad_position, int) else tuple(grad_position))

    def wrapped(*args: Any) -> Any:
        def f(wvals, xs):
            full = list(args)
            for p, x in zip(positions, xs):
                full[p] = x
            old = [w.get_raw_value() for w in weights]
            try:
                for w, v in zip(weights, wvals):
                    _swap(w, v)
                out = fn(*full)
            finally:
                for w, v in zip(weights, old):
                    _swap(w, v)
            if has_aux:
                return out[0], tuple(out[1:])
            return out, ()

        wvals = [w.get_raw_value() for w in weights]
        xs = [jnp.asarray(args[p]) for p in positions]
        value, vjp, aux = jax.vjp(f, wvals, xs, has_aux=True)
        g_w, g_x = vjp(jnp.ones_like(value))
        g_x = g_x[0] if isinstance(grad_position, int) else tuple(g_x)
        if positions and weights:
            grads = (g_x, tuple(g_w))
        else:
            grads = tuple(g_w) if weights else g_x
        return ((value,) + aux if has_aux else value), grads

    return wrapped


def grad(fn: Callable[..., Any], grad_position: int | tuple[int, ...] | None = 0,
         weights: Sequence[Parameter] | None = None, has_aux: bool = False) -> Callable[..., Any]:
    """MindSpore's ``grad``: the gradients of ``value_and_grad`` without the value."""
    vg = value_and_grad(fn, grad_position, weights, has_aux)

    def wrapped(*args: Any) -> Any:
        value, grads = vg(*args)
        return (grads, value[1:]) if has_aux else grads

    return wrapped
