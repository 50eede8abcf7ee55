"""Which outputs of a per-rank function are the same on every rank (a jaxpr pass).

A top-level call of a Cell with collective ops returns global arrays. An output that is *replicated* (identical on
every rank: the result of a world AllGather, AllReduce or Broadcast, or anything computed only from such values and
replicated inputs) comes back once; any other output comes back as the per-rank values concatenated along
dimension 0. This pass decides which is which from the traced jaxpr, so the answer is static (it never depends on
the data).

Reads: a ``ClosedJaxpr`` traced with the rank axis bound (``jax.make_jaxpr(..., axis_env=...)``) and which inputs
vary per rank. Rules: ``axis_index`` and the ops that hand each rank its own part (``reduce_scatter``,
``all_to_all``, ``ppermute``) vary; ``psum``/``pmax``/``pmin``/``all_gather`` over the rank axis without
``axis_index_groups`` are replicated; calls (``pjit``, ``custom_vjp_call`` ...) are analysed inside; every other
equation varies when any input varies. Not handled: control flow is judged conservatively (a ``scan`` or ``cond``
with a varying input is varying even if it reduces over the axis inside) — such an output is returned per rank,
which is still correct, only not de-duplicated.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

_REPLICATING = {"psum", "pmax", "pmin", "all_gather", "psum_invariant", "all_gather_invariant"}
_DISTRIBUTING = {"axis_index", "reduce_scatter", "all_to_all", "ppermute", "psum_scatter"}


def _axes(params: dict) -> tuple:
    names = params.get("axes", params.get("axis_name", ()))
    return names if isinstance(names, tuple) else (names,)


def _inner(eqn) -> Jaxpr | None:
    """The sub-jaxpr of a call-like equation whose inputs and outputs map one to one onto the equation's."""
    for value in eqn.params.values():
        jaxpr = value.jaxpr if isinstance(value, ClosedJaxpr) else value
        if isinstance(jaxpr, Jaxpr) and len(jaxpr.invars) == len(eqn.invars) and \
                len(jaxpr.outvars) == len(eqn.outvars):
            return jaxpr
    return None


def _analyse(jaxpr: Jaxpr, varying_in: Sequence[bool], axis: str) -> list[bool]:
    env: dict = {}

    def read(v) -> bool:
        return False if isinstance(v, Literal) else env.get(v, False)

    for var, flag in zip(jaxpr.invars, varying_in):
        env[var] = flag
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        inputs = [read(v) for v in eqn.invars]
        if name in _DISTRIBUTING and axis in _axes(eqn.params):
            outs = [True] * len(eqn.outvars)  # each rank gets its own part, even of a replicated input
        elif name in _REPLICATING and axis in _axes(eqn.params) and eqn.params.get("axis_index_groups") is None:
            outs = [False] * len(eqn.outvars)
        elif (inner := _inner(eqn)) is not None:
            outs = _analyse(inner, inputs, axis)
        else:
            outs = [any(inputs)] * len(eqn.outvars)
        for var, flag in zip(eqn.outvars, outs):
            env[var] = flag
    return [read(v) for v in jaxpr.outvars]


def varying_outputs(closed: ClosedJaxpr, varying_in: Sequence[bool], axis: str) -> list[bool]:
    """For each output of ``closed``: True if it may differ between ranks of ``axis``."""
    return _analyse(closed.jaxpr, varying_in, axis)
