"""Sharding rules of raw jax primitives (``jnp``/``lax`` calls written directly in ``construct``)."""

from __future__ import annotations

from graphpar.planner.dims import (
    SILENT_REPLICATED, DimSpec, elementwise, reduction, register, replicated, reshape, shapes_of)

ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "rem", "pow", "max", "min", "neg", "exp", "exp2", "log", "log1p", "expm1", "tanh",
    "logistic", "sqrt", "rsqrt", "cbrt", "abs", "sign", "floor", "ceil", "round", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erf_inv", "lgamma",
    "digamma", "integer_pow", "square", "select_n", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not", "xor",
    "convert_element_type", "stop_gradient", "copy", "copy_p", "nextafter", "is_finite", "clamp", "reduce_precision",
    "real", "imag", "conj", "shift_left", "shift_right_logical", "shift_right_arithmetic", "population_count",
    "add_any",  # JAX's sum of two cotangents of one value: every gradient taken in construct has them
})
SILENT_REPLICATED.update({"random_split", "random_fold_in", "random_seed", "random_wrap",
                          "random_unwrap", "threefry2x32", "iota",
                          "debug_print", "debug_callback"})  # ops.Print: prints the whole value, has no output


@register(*ELEMENTWISE)
def _elementwise(node, graph):
    ins, outs = shapes_of(node, graph)
    return elementwise(ins, outs)


@register("random_bits")
def _random_bits(node, graph):
    """Bits drawn from one key (the key whole): split like an elementwise output, since JAX's threefry is
    partitionable (``jax_threefry_partitionable``): each device draws its block of the same bits, so a dropout
    mask recomputed in a backward pass is never drawn whole on every device."""
    _, outs = shapes_of(node, graph)
    labels = tuple(f"d{i}" for i in range(len(outs[0])))
    return DimSpec(tuple(tuple(None for _ in s) for s in shapes_of(node, graph)[0]), (labels,), labels)


@register("bitcast_convert_type")
def _bitcast(node, graph):
    """Elementwise between types of one width (the random bits of a dropout mask become floats); a change of
    width adds or drops a trailing dimension, which stays whole."""
    ins, outs = shapes_of(node, graph)
    if ins[0] == outs[0]:
        return elementwise(ins, outs)
    common = min(len(ins[0]), len(outs[0]))
    labels = tuple(f"d{i}" for i in range(common))
    return DimSpec((labels + (None,) * (len(ins[0]) - common),), (labels + (None,) * (len(outs[0]) - common),),
                   labels)


@register("dot_general")
def _dot_general(node, graph):
    ins, _ = shapes_of(node, graph)
    (lc, rc), (lb, rb) = node.eqn.params["dimension_numbers"]
    lhs = [None] * len(ins[0])
    rhs = [None] * len(ins[1])
    batch = []
    for k, (a, b) in enumerate(zip(lb, rb)):
        lhs[a] = rhs[b] = f"b{k}"
        batch.append(f"b{k}")
    contract = []
    for k, (a, b) in enumerate(zip(lc, rc)):
        lhs[a] = rhs[b] = f"k{k}"
        contract.append(f"k{k}")
    lfree = [f"i{d}" for d in range(len(lhs)) if lhs[d] is None]
    rfree = [f"j{d}" for d in range(len(rhs)) if rhs[d] is None]
    it = iter(lfree)
    lhs = [l if l is not None else next(it) for l in lhs]
    it = iter(rfree)
    rhs = [l if l is not None else next(it) for l in rhs]
    out = tuple(batch + lfree + rfree)
    return DimSpec((tuple(lhs), tuple(rhs)), (out,), tuple(batch + lfree + contract + rfree))


@register("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "argmax", "argmin")
def _reduce(node, graph):
    ins, _ = shapes_of(node, graph)
    return reduction(ins[0], node.eqn.params["axes"], False)


@register("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(node, graph):
    ins, outs = shapes_of(node, graph)
    return elementwise(ins, outs, fixed_axes=(node.eqn.params["axis"],))


@register("sort")
def _sort(node, graph):
    ins, outs = shapes_of(node, graph)
    return elementwise(ins, outs, fixed_axes=(node.eqn.params["dimension"],))


@register("broadcast_in_dim")
def _broadcast_in_dim(node, graph):
    ins, outs = shapes_of(node, graph)
    out = outs[0]
    labels = tuple(f"d{i}" for i in range(len(out)))
    dims = node.eqn.params["broadcast_dimensions"]
    row = tuple(labels[d] if ins[0][k] == out[d] else None for k, d in enumerate(dims))
    return DimSpec((row,) + tuple(tuple(None for _ in s) for s in ins[1:]), (labels,), labels)


@register("reshape", "squeeze", "expand_dims")
def _reshape(node, graph):
    ins, outs = shapes_of(node, graph)
    return reshape(ins[0], outs[0], len(ins))


@register("transpose")
def _transpose(node, graph):
    ins, _ = shapes_of(node, graph)
    labels = tuple(f"d{i}" for i in range(len(ins[0])))
    return DimSpec((labels,), (tuple(labels[p] for p in node.eqn.params["permutation"]),), labels)


@register("concatenate")
def _concatenate(node, graph):
    ins, outs = shapes_of(node, graph)
    labels = tuple(f"d{i}" for i in range(len(outs[0])))
    return DimSpec(tuple(labels for _ in ins), (labels,), labels,
                   frozenset({labels[node.eqn.params["dimension"]]}))


@register("slice", "pad", "rev", "dynamic_slice", "dynamic_update_slice")
def _slice(node, graph):
    ins, outs = shapes_of(node, graph)
    x, out = ins[0], outs[0]
    if len(x) != len(out):
        return None
    fixed = set(node.eqn.params.get("dimensions", ()))
    labels = tuple(f"d{i}" if a == b and i not in fixed else None for i, (a, b) in enumerate(zip(x, out)))
    if node.eqn.primitive.name == "dynamic_update_slice":
        upd = tuple(labels[i] if ins[1][i] == x[i] else None for i in range(len(x)))
        rest = tuple(() for _ in ins[2:])
        return DimSpec((labels, upd) + rest, (labels,), tuple(l for l in labels if l))
    rest = tuple(tuple(None for _ in s) for s in ins[1:])
    return DimSpec((labels,) + rest, (labels,), tuple(l for l in labels if l))


@register("reduce_window_max", "reduce_window_min", "reduce_window_sum", "reduce_window")
def _reduce_window(node, graph):
    ins, outs = shapes_of(node, graph)
    dims = node.eqn.params.get("window_dimensions", ())
    strides = node.eqn.params.get("window_strides", ())
    labels = tuple(f"d{i}" if (i < len(dims) and dims[i] == 1 and (not strides or strides[i] == 1)) else None
                   for i in range(len(outs[0])))
    rest = tuple(tuple(None for _ in s) for s in ins[1:])
    return DimSpec((labels,) + rest, tuple(labels for _ in outs), tuple(l for l in labels if l))


@register("conv_general_dilated")
def _conv(node, graph):
    dn = node.eqn.params["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
    groups = node.eqn.params.get("feature_group_count", 1) * node.eqn.params.get("batch_group_count", 1)
    ins, outs = shapes_of(node, graph)
    lhs = [None] * len(ins[0])
    rhs = [None] * len(ins[1])
    out = [None] * len(outs[0])
    lhs[lhs_spec[0]] = out[out_spec[0]] = "n"
    order = ["n"]
    if groups == 1:
        lhs[lhs_spec[1]] = rhs[rhs_spec[1]] = "c"
        rhs[rhs_spec[0]] = out[out_spec[1]] = "o"
        order += ["c", "o"]
    return DimSpec((tuple(lhs), tuple(rhs)), (tuple(out),), tuple(order))


@register("gather")
def _gather(node, graph):
    ins, outs = shapes_of(node, graph)
    dn = node.eqn.params["dimension_numbers"]
    slice_sizes = node.eqn.params["slice_sizes"]
    operand, indices = ins[0], ins[1]
    out = outs[0]
    if getattr(dn, "operand_batching_dims", ()):
        return None
    offset_operand = [d for d in range(len(operand)) if d not in dn.collapsed_slice_dims]
    op_row: list = [None] * len(operand)
    out_row: list = [None] * len(out)
    order = []
    for k, (od, d) in enumerate(zip(dn.offset_dims, offset_operand)):
        if slice_sizes[d] == operand[d] and out[od] == operand[d]:
            op_row[d] = out_row[od] = f"p{d}"
            order.append(f"p{d}")
    batch_out = [d for d in range(len(out)) if d not in dn.offset_dims]
    idx_row: list = [None] * len(indices)
    idx_dims = [d for d in range(len(indices)) if d != len(indices) - 1] if len(indices) else []
    for od, idim in zip(batch_out, idx_dims):
        if indices[idim] == out[od]:
            idx_row[idim] = out_row[od] = f"q{idim}"
            order.insert(0, f"q{idim}")
    return DimSpec((tuple(op_row), tuple(idx_row)), (tuple(out_row),), tuple(order))


@register(*sorted(SILENT_REPLICATED))
def _silent(node, graph):
    ins, outs = shapes_of(node, graph)
    return replicated(ins, outs)
