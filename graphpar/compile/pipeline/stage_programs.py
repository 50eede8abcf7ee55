"""The programs of one pipeline stage: forward (keeping residuals), backward (accumulating gradients), update.

Each is jitted for the stage's own mesh. The forward evaluates the stage's sub-graph (``compile.interpret``, every
layout pinned) under ``jax.vjp`` and returns the VJP object itself: a pytree whose leaves are the residuals the
backward needs, so they stay on the stage's devices as ordinary arrays until that micro-batch's backward consumes
them. Only floating-point activations are differentiated (an integer activation crossing stages has no gradient).

A schedule that splits the backward (zero_bubble_v) runs it as two programs on the same VJP object and output
cotangent: ``backward_input`` returns only the gradient of the received activations (``B``: what the previous
stage waits for) and ``backward_weight`` only the parameters' gradient (``W``), accumulated. Each is one jitted call
of the whole VJP whose unused outputs XLA removes as dead code, so ``B`` does no weight-gradient work; but ``W``
repeats the part of the activation-gradient chain inside the stage that the weight gradients need (all of it but the
last step into the received activations: nothing for a stage of one Dense layer, most of ``B`` for a deep one), and
the residuals and the cotangent stay alive from ``B`` until ``W``. The alternative, a ``B`` that also returns every
intermediate cotangent a weight gradient reads, would avoid the repeat at the price of holding those cotangents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from graphpar.compile.lowering.interpret import evaluate
from graphpar.compile.lowering.recompute import activations_only, naming_activations
from graphpar.ir.graph import Graph
from graphpar.compile.pipeline.stage_split import StageGraph


def is_float(value: Any) -> bool:
    return isinstance(value.dtype, np.dtype) and np.issubdtype(value.dtype, np.floating)


@dataclass(frozen=True)
class ResidualTree:
    """The forward's VJP without the stage's own parameters: a VJP keeps the operands its products read, a weight
    among them, and a jitted program returns each of its outputs as a new buffer, so returning the whole VJP would
    hold a copy of the stage's weights per micro-batch in flight. The forward returns the other leaves only;
    :meth:`join` puts the parameters' own arrays back in their places. A value of the stage program: found once,
    when the stage's programs are built (:func:`residual_tree`), and handed to whoever joins a forward's output."""

    tree: Any  # the VJP's tree structure
    params: tuple[int, ...]  # per leaf, the index of the stage parameter it is (-1: a residual the forward returns)

    def join(self, kept: Sequence[Any], pvals: Sequence[Any]) -> Any:
        """The VJP of the forward that was called with parameters ``pvals`` and returned residuals ``kept``."""
        rest = iter(kept)
        return jax.tree.unflatten(self.tree, [pvals[k] if k >= 0 else next(rest) for k in self.params])


def split_residuals(vjp: Any, pvals: Sequence[Any]) -> tuple[ResidualTree, list[Any]]:
    """The tree of ``vjp`` (taken inside the forward, ``pvals`` its parameters) and its leaves that are not one of
    ``pvals`` (by identity: the VJP keeps the parameter's own tracer)."""
    leaves, tree = jax.tree.flatten(vjp)
    own = {id(p): i for i, p in enumerate(pvals)}
    params = tuple(own.get(id(x), -1) for x in leaves)
    return ResidualTree(tree, params), [x for x, k in zip(leaves, params) if k < 0]


def residual_tree(forward: Callable[..., Any], args: Sequence[Any]) -> ResidualTree:
    """The :class:`ResidualTree` of ``forward`` (a stage forward with its VJP as last output) traced abstractly on
    ``args`` (``pvals`` first): the tree is only seen inside the trace, so it is taken there and returned."""
    found: list[ResidualTree] = []

    def probe(*a: Any) -> list[Any]:
        tree, kept = split_residuals(forward(*a)[-1], a[0])
        found.append(tree)
        return kept

    jax.eval_shape(probe, *args)
    return found[0]


def forward_avals(sg: StageGraph) -> tuple[list[jax.ShapeDtypeStruct], ...]:
    """The abstract arguments of stage ``sg``'s forward: ``(pvals, rvals, data, recv)``, cut from its graph's
    inputs (``params + rest + data + received``)."""
    values = sg.graph.values
    avals = [jax.ShapeDtypeStruct(values[v].shape, values[v].dtype) for v in sg.graph.inputs]
    ends = np.cumsum([len(sg.params), len(sg.rest), len(sg.data)])
    return avals[:ends[0]], avals[ends[0]:ends[1]], avals[ends[1]:ends[2]], avals[ends[2]:]


def stage_programs(graph: Graph, sg: StageGraph, mesh: Mesh, names: Sequence[str],
                   tx: optax.GradientTransformation, sens: float,
                   donate_gradients: bool = True) -> tuple[ResidualTree, tuple[Any, ...]]:
    """How the forward's residuals are put back together (:func:`residual_tree`, found here once), and
    ``(forward, backward, update, zeros, backward_input, backward_weight)`` of stage ``sg`` (jitted, compiled on
    first call); ``names``: its parameters' names, ``sens``: the loss sensitivity (MindSpore's
    ``TrainOneStepCell(sens=...)``); ``donate_gradients``: whether the update takes the gradients' buffers (not
    when a functional step may still hold them)."""
    g = sg.graph
    recv_float = [i for i, v in enumerate(sg.received) if is_float(graph.values[v])]
    sent_float = [i for i, v in enumerate(sg.sent) if is_float(graph.values[v])]
    n_sent = len(sg.sent)
    loss_value = graph.values[graph.outputs[0]]

    def forward_vjp(pvals, rvals, data, recv):
        def f(p, rf):
            full = list(recv)
            for i, x in zip(recv_float, rf):
                full[i] = x
            outs = evaluate(g, list(p) + list(rvals) + list(data) + full, mesh)
            sent = outs[:n_sent]
            loss = outs[n_sent] if sg.has_loss else None
            rest = outs[n_sent + (1 if sg.has_loss else 0):]
            diff = ([sent[i] for i in sent_float], loss)
            return diff, (sent, rest)

        with naming_activations():  # the VJP keeps the ops' outputs, not each primitive's intermediates
            (_, loss), vjp, (sent, rest) = jax.vjp(jax.checkpoint(f, policy=activations_only()), list(pvals),
                                                   [recv[i] for i in recv_float], has_aux=True)
        # the reported loss of this micro-batch (as TrainProgram reports it): its mean, in float32
        return sent, None if loss is None else jnp.mean(loss.astype(jnp.float32)), rest, vjp

    def forward(pvals, rvals, data, recv):
        *out, vjp = forward_vjp(pvals, rvals, data, recv)
        return *out, split_residuals(vjp, pvals)[1]

    def backward(vjp, ct_sent, acc):
        ct_loss = jnp.full(loss_value.shape, sens, loss_value.dtype) if sg.has_loss else None
        dp, drecv = vjp(([ct_sent[i] for i in sent_float], ct_loss))
        return [a + d for a, d in zip(acc, dp)], drecv

    def backward_input(vjp, ct_sent):
        return backward(vjp, ct_sent, [])[1]  # the parameters' gradient is dead code

    def backward_weight(vjp, ct_sent, acc):
        return backward(vjp, ct_sent, acc)[0]  # the received activations' gradient is dead code

    def step(pvals, grads, opt_state):
        pdict, gdict = dict(zip(names, pvals)), dict(zip(names, grads))
        updates, opt_state = tx.update(gdict, opt_state, pdict)
        new = optax.apply_updates(pdict, updates)
        return [new[name] for name in names], opt_state

    def zeros(pvals):
        return [jnp.zeros_like(p) for p in pvals]

    update_donates = (0, 1, 2) if donate_gradients else (0, 2)
    return residual_tree(forward_vjp, forward_avals(sg)), (
        jax.jit(forward), jax.jit(backward, donate_argnums=(2,)), jax.jit(step, donate_argnums=update_donates),
        jax.jit(zeros), jax.jit(backward_input), jax.jit(backward_weight, donate_argnums=(2,)))
