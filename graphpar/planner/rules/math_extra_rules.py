"""Sharding rules of ``graphpar.ops.math_extra_ops``, as MindSpore's OperatorInfo classes decide them: the
elementwise ops (``Tril`` included, as MindSpore's TrilInfo splits the matrix dims) split every dim; ``CumProd``,
``Cummax``, ``Cummin`` and ``ReverseV2`` keep their axes whole; ``SquareSumAll`` and ``LpNorm`` reduce (a split
reduced dim leaves a partial result, reduced across devices); ``Cholesky`` keeps its matrix dims whole;
``Eye``/``FillV2`` create a tensor from no tensor input and are planned replicated."""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, elementwise, reduction, register, shapes_of


@register("Invert", "PopulationCount", "HShrink", "ApproximateEqual", "Tril", "Lgamma", "Trunc", "Elu")
def _elementwise(node, graph):
    ins, outs = shapes_of(node, graph)
    return elementwise(ins, outs)


@register("CumProd")
def _cum_prod(node, graph):
    ins, outs = shapes_of(node, graph)
    axis = node.static_args.get(1, 0)
    return elementwise(ins[:1], outs, fixed_axes=(axis,))


@register("Cummax", "Cummin", "ReverseV2")
def _along_axes(node, graph):
    ins, outs = shapes_of(node, graph)
    axis = node.attrs["axis"]
    return elementwise(ins, outs, fixed_axes=axis if isinstance(axis, tuple) else (axis,))


@register("SquareSumAll")
def _square_sum_all(node, graph):
    ins, _ = shapes_of(node, graph)
    labels = tuple(f"d{i}" for i in range(len(ins[0])))
    return DimSpec((labels, labels), ((), ()), labels)


@register("LpNorm")
def _lp_norm(node, graph):
    ins, _ = shapes_of(node, graph)
    return reduction(ins[0], node.attrs["axis"], node.attrs["keep_dims"])


@register("Cholesky")
def _cholesky(node, graph):
    ins, _ = shapes_of(node, graph)
    labels = tuple(f"d{i}" for i in range(len(ins[0]) - 2)) + (None, None)
    return DimSpec((labels,), (labels,), labels[:-2])
