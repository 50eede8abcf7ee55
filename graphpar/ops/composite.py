"""Gradients the MindSpore way: ``ops.GradOperation`` and the functional ``grad`` / ``value_and_grad``.

``GradOperation(get_all, get_by_list, sens_param)(network, weights)(*inputs)`` differentiates a Cell with respect
to its inputs and/or a ParameterTuple: the Cell is split into pure state with flax NNX and re-merged inside
``jax.vjp``, so it works eagerly and inside a traced step alike. ``value_and_grad(fn, grad_position, weights,
has_aux)`` differentiates a plain function that closes over Cells: the weights' values are substituted for the
duration of the call (and always restored), which is the only way to reach Parameters held by an arbitrary closure.

Inside a compiled training step (``graphpar.jit``, ``AutoParallel``) the same calls are answered by the step being
traced (:class:`StepTrace`, entered with :func:`tracing_step` by ``graphpar.compile.functional``): it differentiates
the *planned* objective, as ``Model.train``'s step does. Called eagerly while a parallel mode is set, they compute
on one device unplanned, and say so once.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import nnx

from graphpar import _context
from graphpar._logging import notice_once
from graphpar.common.parameter import Parameter
from graphpar.ir.recorder import inner_gradient
from graphpar.ops.random_ops import RngKey


@dataclass(frozen=True)
class Differentiation:
    """One gradient call as the user asked for it: ``fn`` (a function or a Cell) called with the call's arguments,
    differentiated w.r.t. the arguments at ``positions`` and the Parameters ``weights``; with ``has_aux`` only the
    first output is differentiated (GradOperation's ``sens_param`` weighs the output with each call's own ``sens``).
    ``origin`` names the API (``value_and_grad``, ``grad``, ``GradOperation``) for messages."""

    fn: Callable[..., Any]
    positions: tuple[int, ...]
    weights: tuple[Parameter, ...]
    has_aux: bool
    origin: str

    @property
    def name(self) -> str:
        return callable_name(self.fn)


def callable_name(fn: Any) -> str:
    """How messages name a function, a method (``Class.method``) or a callable object (its class)."""
    if isinstance(fn, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return fn.__qualname__.rsplit("<locals>.", 1)[-1]
    if isinstance(fn, functools.partial):
        return callable_name(fn.func)
    return type(fn).__name__


class StepTrace(Protocol):
    """The compiled step being traced (``graphpar.compile.functional``): it answers the gradient calls the step
    function makes, so that they run as ``Model.train``'s step runs them (the optimizer's call needs no answer: it
    updates the Parameters and state the step lends it; a pipelined step, run with concrete values, answers it with
    its stages' updates)."""

    def differentiate(self, spec: Differentiation, args: tuple, sens: Any) -> tuple[Any, tuple, tuple]:
        """``(value, weight_grads, input_grads)`` of ``spec`` on ``args`` (``value``: the full output)."""
        ...

    def computes(self, cell: Any, args: tuple, kwargs: dict) -> bool:
        """Whether a call of ``cell`` in the step is answered by :meth:`forward` (the differentiated Cell called
        on the gradient's arguments: ``loss = self.network(*inputs)`` before ``GradOperation``; the optimizer of a
        pipelined step)."""
        ...

    def forward(self, cell: Any, args: tuple, kwargs: dict) -> Any:
        """The output of that call (the differentiated Cell's: computed with the gradient, one forward for both)."""
        ...


_tracing: list[StepTrace] = []


@contextlib.contextmanager
def tracing_step(trace: StepTrace) -> Iterator[None]:
    """Gradient calls made inside go to ``trace`` (a compiled step being traced)."""
    _tracing.append(trace)
    try:
        yield
    finally:
        _tracing.pop()


def active_step() -> StepTrace | None:
    """The compiled step being traced, or None (gradients are then computed where they are called)."""
    return _tracing[-1] if _tracing else None


def _say_if_unplanned(spec: Differentiation, args: tuple) -> None:
    """Say once when a gradient is computed eagerly while a parallel mode is set: it runs on one device, unplanned
    (graphpar plans a step only when it is compiled: ``@ms.jit``, ``AutoParallel``, ``Model.train``)."""
    mode = _context.current_parallel().parallel_mode
    if mode == _context.ParallelMode.STAND_ALONE or any(isinstance(a, jax.core.Tracer)
                                                         for a in jax.tree.leaves(args)):
        return
    notice_once(f"unplanned-gradient:{spec.name}",
                f"{spec.origin} of '{spec.name}' runs eagerly on one device: parallel_mode={mode!r} plans and "
                "compiles a training step only when it is compiled as one; decorate the step function with "
                "@ms.jit (or wrap it in AutoParallel) so that its forward, gradients and optimizer update are "
                "planned over the devices")


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
        weights = tuple(weights or ()) if self.get_by_list else ()

        def grad_fn(*inputs: Any) -> Any:
            sens = inputs[-1] if self.sens_param else None
            xs = inputs[:-1] if self.sens_param else inputs
            positions = tuple(range(len(xs))) if self.get_all else (() if self.get_by_list else (0,))
            spec = Differentiation(network, positions, weights, False, "GradOperation")
            step = active_step()
            if step is not None:
                _, g_weights, g_inputs = step.differentiate(spec, tuple(xs), sens)
            else:
                _say_if_unplanned(spec, xs)
                g_weights, g_inputs = self._eager(network, weights, xs, sens)
                g_inputs = tuple(g_inputs[p] for p in positions)
            if self.get_by_list and self.get_all:
                return g_inputs, g_weights
            if self.get_by_list:
                return g_weights
            if self.get_all:
                return g_inputs
            return g_inputs[0]

        return grad_fn

    @staticmethod
    def _eager(network: Any, weights: Sequence[Parameter], xs: Sequence[Any], sens: Any) -> tuple[tuple, tuple]:
        """``(weight_grads, grads of every input)``: the Cell split with NNX and re-merged inside ``jax.vjp``."""
        ids = [id(w) for w in weights]
        graphdef, chosen, rest = nnx.split(network, lambda path, v: id(v) in ids, ...)
        order = {id(v): i for i, (_, v) in enumerate(nnx.to_flat_state(chosen))}
        missing = [w.name for w in weights if id(w) not in order]
        if missing:
            raise ValueError(f"GradOperation: weights {missing} are not parameters of {type(network).__name__}")

        def f(chosen_state, xs):
            # a copy: the network's own Variables belong to the caller's trace, and a stochastic op (ops.Dropout)
            # advances its key inside this one; the advanced keys come back as auxiliary outputs
            merged = nnx.merge(graphdef, chosen_state, rest, copy=True)
            return merged(*xs), [v.get_value() for _, v in nnx.to_flat_state(nnx.state(merged, RngKey))]

        with inner_gradient():
            out, vjp, keys = jax.vjp(f, chosen, tuple(jnp.asarray(x) for x in xs), has_aux=True)
        for (_, variable), key in zip(nnx.to_flat_state(nnx.state(network, RngKey)), keys):
            variable.set_value(key)
        g_state, g_inputs = vjp(_ones_like_tree(out) if sens is None else sens)
        flat = [v for _, v in nnx.to_flat_state(g_state)]
        g_weights = tuple(flat[order[i]].get_value() if hasattr(flat[order[i]], "get_value")
                          else flat[order[i]] for i in ids)
        return g_weights, tuple(g_inputs)


def _eager_value_and_grad(spec: Differentiation, args: tuple) -> tuple[Any, tuple, tuple]:
    """``(value, weight_grads, input_grads)`` computed where called: the weights' values are swapped for the
    duration of the call (and always restored)."""
    weights, positions, has_aux = spec.weights, spec.positions, spec.has_aux

    def f(wvals, xs):
        full = list(args)
        for p, x in zip(positions, xs):
            full[p] = x
        old = [w.get_raw_value() for w in weights]
        try:
            for w, v in zip(weights, wvals):
                _swap(w, v)
            out = spec.fn(*full)
        finally:
            for w, v in zip(weights, old):
                _swap(w, v)
        if has_aux:
            return out[0], tuple(out[1:])
        return out, ()

    wvals = [w.get_raw_value() for w in weights]
    xs = [jnp.asarray(args[p]) for p in positions]
    with inner_gradient():
        value, vjp, aux = jax.vjp(f, wvals, xs, has_aux=True)
    g_w, g_x = vjp(jnp.ones_like(value))
    return ((value,) + aux if has_aux else value), tuple(g_w), tuple(g_x)


def value_and_grad(fn: Callable[..., Any], grad_position: int | tuple[int, ...] | None = 0,
                   weights: Sequence[Parameter] | None = None, has_aux: bool = False) -> Callable[..., Any]:
    """MindSpore's ``value_and_grad``: returns ``(value, grads)``; grads are w.r.t. the inputs at
    ``grad_position`` and/or ``weights`` (``(inputs_grads, weights_grads)`` when both are asked). With
    ``has_aux`` the function returns ``(loss, *aux)``, only ``loss`` is differentiated, and the value is the
    whole tuple."""
    return _value_and_grad(fn, grad_position, weights, has_aux, "value_and_grad")


def _value_and_grad(fn: Callable[..., Any], grad_position: int | tuple[int, ...] | None,
                    weights: Sequence[Parameter] | None, has_aux: bool, origin: str) -> Callable[..., Any]:
    weights = list(weights or [])
    if grad_position is None and not weights:
        raise ValueError(f"{origin}: give grad_position, weights, or both")
    positions = () if grad_position is None else (
        (grad_position,) if isinstance(grad_position, int) else tuple(grad_position))
    spec = Differentiation(fn, positions, tuple(weights), has_aux, origin)

    def wrapped(*args: Any) -> Any:
        step = active_step()
        if step is not None:
            value, g_w, g_x = step.differentiate(spec, args, None)
        else:
            _say_if_unplanned(spec, args)
            value, g_w, g_x = _eager_value_and_grad(spec, args)
        g_x = g_x[0] if isinstance(grad_position, int) else tuple(g_x)
        if positions and weights:
            grads = (g_x, tuple(g_w))
        else:
            grads = tuple(g_w) if weights else g_x
        return value, grads

    return wrapped


def grad(fn: Callable[..., Any], grad_position: int | tuple[int, ...] | None = 0,
         weights: Sequence[Parameter] | None = None, has_aux: bool = False) -> Callable[..., Any]:
    """MindSpore's ``grad``: the gradients of ``value_and_grad`` without the value."""
    vg = _value_and_grad(fn, grad_position, weights, has_aux, "grad")

    def wrapped(*args: Any) -> Any:
        value, grads = vg(*args)
        return (grads, value[1:]) if has_aux else grads

    return wrapped
