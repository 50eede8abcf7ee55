"""Per-primitive rules of the channels-last pass: how one equation computes when its operands are held in another
physical order (``compile.lowering.channels_last``).

A value's *layout* is a permutation ``p`` of its dimensions: physical dimension ``j`` holds logical dimension
``p[j]`` (the array the program holds is ``transpose(logical, p)``); ``None`` is the order the user wrote. A rule
reads the equation and its operands' layouts and says (:class:`Relaid`) in which layout each operand is read, in
which layout each result comes out, and the bind params that compute exactly the logical equation on those physical
arrays: a convolution's ``dimension_numbers``, a reduction's ``axes``, a window's per-dimension sizes, all mapped
through the permutation. A value read in another layout than it is held in is converted (a transpose: an edge of
the channels-last region; free when only unit dimensions move).

Rules exist for what a convolutional network computes between its convolutions: elementwise ops (with size-1
broadcasting), reductions, windows (pooling), ``pad``, ``transpose`` (a relabelling: no data moves), ``concatenate``,
``slice``, ``rev``, cumulative ops, ``split``, named-axis collectives, and the convolution itself, which reads its
input channels-last whatever layout it is held in (that is what seeds the region). ``broadcast_in_dim``, ``reshape``
and ``squeeze`` that only move unit dimensions are *deferred* (:data:`FLEX`): made in whatever layout their first
reader wants, so BatchNorm's per-channel statistics never cost a transpose. Every other primitive (``dot_general``,
a reshape that merges dimensions, gathers, control flow, custom derivatives, random bits) has no rule and reads its
operands in the written layout: semantics never depend on a rule being present, only the number of transposes does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jax import lax

Perm = tuple[int, ...] | None
FLEX = "flex"  # a deferred value: made in the layout its reader wants
ANY = "any"  # an operand read as it is held (a scalar)


def norm(p: Sequence[int] | None) -> Perm:
    """``p`` as a layout: None for the identity."""
    if p is None:
        return None
    p = tuple(int(i) for i in p)
    return None if p == tuple(range(len(p))) else p


def inverse(p: Perm, rank: int) -> tuple[int, ...]:
    """Where each logical dimension sits physically."""
    if p is None:
        return tuple(range(rank))
    inv = [0] * rank
    for j, d in enumerate(p):
        inv[d] = j
    return tuple(inv)


def channels_last(spec: Sequence[int]) -> tuple[int, ...]:
    """The channels-last order of a convolution operand described by ``spec`` = (batch, feature, spatial...)."""
    return (spec[0], *spec[2:], spec[1])


@dataclass(frozen=True)
class Relaid:
    """How one equation is computed: ``want`` per operand (a layout, or :data:`ANY`), ``out`` per result (a layout,
    or :data:`FLEX` when ``kind`` is "defer"), ``params`` replacing some bind params. ``kind``: "bind" (bind the
    primitive), "alias" (the result is the operand, relabelled: a transpose), "defer" (made on demand), "call" (a
    nested ``jit`` analysed inside)."""

    want: tuple[Any, ...]
    out: tuple[Any, ...]
    params: dict[str, Any] = field(default_factory=dict)
    kind: str = "bind"
    seeds: int = 0  # convolutions this equation runs channels-last


def written(eqn: Any) -> Relaid:
    """No rule: every operand in the written layout, every result too."""
    return Relaid(tuple(None for _ in eqn.invars), tuple(None for _ in eqn.outvars))


Rule = Callable[[Any, Sequence[Any]], Relaid | None]
RULES: dict[str, Rule] = {}


def register(*names: str) -> Callable[[Rule], Rule]:
    def add(rule: Rule) -> Rule:
        for name in names:
            RULES[name] = rule
        return rule
    return add


def _rank(atom: Any) -> int:
    return len(atom.aval.shape)


def _held(state: Any) -> bool:
    """A value held in a layout other than the written one."""
    return state is not None and state not in (FLEX, ANY)


def _map_dims(per_dim: Sequence[Any], p: Perm) -> tuple[Any, ...]:
    """A per-dimension tuple (window sizes, padding, slice bounds) in physical order."""
    return tuple(per_dim) if p is None else tuple(per_dim[d] for d in p)


ELEMENTWISE = (
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter", "neg", "abs", "sign", "floor",
    "ceil", "round", "is_finite", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "square",
    "integer_pow", "erf", "erfc", "erf_inv", "lgamma", "digamma", "eq", "ne", "lt", "le", "gt", "ge", "and", "or",
    "not", "xor", "select_n", "clamp", "convert_element_type", "stop_gradient", "copy", "copy_p", "reduce_precision",
    "real", "imag", "conj", "population_count", "clz", "shift_left", "shift_right_logical",
    "shift_right_arithmetic",
)


@register(*ELEMENTWISE)
def _elementwise(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    """Operands of the result's rank (size-1 dimensions broadcast) are read in the layout of the first one held
    permuted; scalars as they are. No permuted operand: the written layout."""
    if eqn.params.get("sharding") is not None:
        return None
    rank = _rank(eqn.outvars[0])
    p = next((s for s, a in zip(states, eqn.invars) if _held(s) and _rank(a) == rank), None)
    if p is None:
        return None
    want = tuple(p if _rank(a) == rank else ANY for a in eqn.invars)
    if any(_rank(a) not in (0, rank) for a in eqn.invars):
        return None
    return Relaid(want, tuple(p for _ in eqn.outvars))


def _reduced_layout(p: Perm, axes: Sequence[int], rank: int) -> Perm:
    """The layout of what is left of a ``p``-held value after removing ``axes``."""
    kept = [d for d in range(rank) if d not in axes]
    renum = {d: i for i, d in enumerate(kept)}
    return norm([renum[d] for d in (p or range(rank)) if d not in axes])


@register("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor",
          "argmax", "argmin")
def _reduce(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    p = states[0]
    if not _held(p) or eqn.params.get("out_sharding") is not None:
        return None
    rank = _rank(eqn.invars[0])
    inv = inverse(p, rank)
    axes = tuple(eqn.params["axes"])
    return Relaid((p,), (_reduced_layout(p, axes, rank),), {"axes": tuple(sorted(inv[a] for a in axes))})


@register("squeeze")
def _squeeze(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    return Relaid((ANY,), (FLEX,), kind="defer")


@register("broadcast_in_dim")
def _broadcast(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    if len(eqn.invars) != 1 or eqn.params.get("sharding") is not None:
        return None
    return Relaid((ANY,), (FLEX,), kind="defer")


def unit_reshape(in_shape: Sequence[int], out_shape: Sequence[int]) -> bool:
    """A reshape that only adds or removes dimensions of size 1."""
    return [d for d in in_shape if d != 1] == [d for d in out_shape if d != 1]


@register("reshape")
def _reshape(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    if (len(eqn.invars) != 1 or eqn.params.get("dimensions") is not None or eqn.params.get("sharding") is not None
            or not unit_reshape(eqn.invars[0].aval.shape, eqn.outvars[0].aval.shape)):
        return None
    return Relaid((ANY,), (FLEX,), kind="defer")


@register("conv_general_dilated")
def _conv(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    """The input and the result channels-last (the convolution's own spec says which dimension is which), the
    kernel as it is held (parameters: as written, OIHW), ``dimension_numbers`` mapped through the layouts."""
    dn = eqn.params["dimension_numbers"]
    if dn is None or _rank(eqn.invars[0]) < 3:
        return None
    rank = _rank(eqn.invars[0])
    lhs = norm(channels_last(dn.lhs_spec))
    out = norm(channels_last(dn.out_spec))
    rhs = states[1] if _held(states[1]) else None
    if lhs is None and out is None and rhs is None:
        return None  # written channels-last already
    inv_l, inv_r, inv_o = inverse(lhs, rank), inverse(rhs, rank), inverse(out, rank)
    mapped = lax.ConvDimensionNumbers(lhs_spec=tuple(inv_l[d] for d in dn.lhs_spec),
                                      rhs_spec=tuple(inv_r[d] for d in dn.rhs_spec),
                                      out_spec=tuple(inv_o[d] for d in dn.out_spec))
    return Relaid((lhs, rhs), (out,), {"dimension_numbers": mapped}, seeds=1)


_WINDOW_PARAMS = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")


@register("reduce_window_max", "reduce_window_min", "reduce_window_sum", "reduce_window")
def _window(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    """Pooling: every per-dimension window parameter in physical order. ``reduce_window`` (a custom computation)
    takes its operands first and their initial values after them."""
    p = states[0]
    if not _held(p):
        return None
    n = len(eqn.invars) if eqn.primitive.name != "reduce_window" else len(eqn.invars) // 2
    rank = _rank(eqn.invars[0])
    if any(_rank(a) != rank for a in eqn.invars[:n]):
        return None
    params = {k: _map_dims(eqn.params[k], p) for k in _WINDOW_PARAMS if eqn.params.get(k) is not None}
    want = tuple(p if i < n else ANY for i in range(len(eqn.invars)))
    return Relaid(want, tuple(p for _ in eqn.outvars), params)


@register("pad")
def _pad(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    p = states[0]
    if not _held(p):
        return None
    return Relaid((p, ANY), (p,), {"padding_config": _map_dims(eqn.params["padding_config"], p)})


@register("transpose")
def _transpose(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    """A transpose of a permuted value moves no data: the result is the same physical array, relabelled."""
    p = states[0]
    if not _held(p):
        return None
    rank = _rank(eqn.invars[0])
    inv_perm = inverse(tuple(eqn.params["permutation"]), rank)
    return Relaid((p,), (norm([inv_perm[d] for d in p]),), kind="alias")


@register("concatenate")
def _concatenate(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    p = next((s for s in states if _held(s)), None)
    if p is None:
        return None
    rank = _rank(eqn.outvars[0])
    return Relaid(tuple(p for _ in eqn.invars), (p,), {"dimension": inverse(p, rank)[eqn.params["dimension"]]})


@register("slice")
def _slice(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    p = states[0]
    if not _held(p):
        return None
    params = {k: _map_dims(eqn.params[k], p) for k in ("start_indices", "limit_indices", "strides")
              if eqn.params.get(k) is not None}
    return Relaid((p,), (p,), params)


@register("rev")
def _rev(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    p = states[0]
    if not _held(p):
        return None
    inv = inverse(p, _rank(eqn.invars[0]))
    return Relaid((p,), (p,), {"dimensions": tuple(sorted(inv[d] for d in eqn.params["dimensions"]))})


@register("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    p = states[0]
    if not _held(p):
        return None
    return Relaid((p,), (p,), {"axis": inverse(p, _rank(eqn.invars[0]))[eqn.params["axis"]]})


@register("split")
def _split(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    p = states[0]
    if not _held(p):
        return None
    return Relaid((p,), tuple(p for _ in eqn.outvars), {"axis": inverse(p, _rank(eqn.invars[0]))[eqn.params["axis"]]})


@register("psum", "pmax", "pmin", "pvary", "optimization_barrier")
def _per_operand(eqn: Any, states: Sequence[Any]) -> Relaid | None:
    """Collectives over named axes (and the optimisation barrier) act on each operand as a whole: each result in its
    operand's layout. Positional axes name array dimensions: no rule."""
    if any(isinstance(a, int) for a in eqn.params.get("axes", ())) or not any(_held(s) for s in states):
        return None
    want = tuple(s if _held(s) else None for s in states)
    return Relaid(want, want)


def rule(eqn: Any, states: Sequence[Any]) -> Relaid:
    """The equation's :class:`Relaid` for operands held in ``states`` (the written layout when no rule applies)."""
    found = RULES.get(eqn.primitive.name)
    relaid = found(eqn, states) if found is not None else None
    return relaid if relaid is not None else written(eqn)
