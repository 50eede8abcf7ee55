"""Sharding rules of ``graphpar.ops.norm_act_ops`` (RmsNorm, PReLU, Lerp, L2Loss, SigmoidCrossEntropyWithLogits,
Swiglu), after MindSpore's ``RmsNormInfo``, ``PReLUInfo``, ``SwigluInfo`` and its arithmetic infos."""

from __future__ import annotations

from graphpar.errors import StrategyError
from graphpar.planner.dims import DimSpec, elementwise, reduction, register, shapes_of


@register("RmsNorm")
def _rms_norm(node, graph):
    """MindSpore's RmsNormInfo: ``gamma`` splits as the trailing dimensions of ``x`` it matches; the normalised
    dimensions may split too (MindSpore 2.3+: the mean of squares is then reduced across their devices). ``y``
    follows ``x``; ``rstd`` (size 1 on the normalised dimensions) follows the leading ones. An ``out_strategy`` is
    refused, as MindSpore refuses it ("not allowed to be set by users"): the outputs' layouts are the input's."""
    if node.out_hint is not None:
        raise StrategyError(node.instance_name, node.out_hint, "RmsNorm's output layouts follow its input's and "
                            "cannot be set", node.scope, "Drop out_strategy; shard x (and gamma) in in_strategy")
    ins, _ = shapes_of(node, graph)
    x, gamma = ins
    begin = len(x) - len(gamma)
    labels = tuple(f"d{i}" for i in range(len(x)))
    rstd = labels[:begin] + (None,) * len(gamma)
    return DimSpec((labels, labels[begin:]), (labels, rstd), labels)


@register("PReLU")
def _prelu(node, graph):
    """MindSpore's PReLUInfo: ``weight`` splits as ``x``'s channel dimension (1, or 0 for a 1-D ``x``); a single
    shared slope stays whole."""
    ins, outs = shapes_of(node, graph)
    x, weight = ins
    labels = tuple(f"d{i}" for i in range(len(x)))
    channel = 1 if len(x) > 1 else 0
    w = (labels[channel],) if weight and weight[0] == x[channel] and weight[0] != 1 else (None,) * len(weight)
    return DimSpec((labels, w), (labels,), labels)


@register("Lerp", "SigmoidCrossEntropyWithLogits")
def _broadcast_elementwise(node, graph):
    """Numpy broadcasting, as MindSpore's arithmetic infos: the inputs' matching dimensions split alike."""
    ins, outs = shapes_of(node, graph)
    return elementwise(ins, outs)


@register("L2Loss")
def _l2_loss(node, graph):
    """A sum over every dimension: any split leaves partial sums the scalar output combines."""
    ins, _ = shapes_of(node, graph)
    return reduction(ins[0], list(range(len(ins[0]))), False)


@register("Swiglu")
def _swiglu(node, graph):
    """MindSpore's SwigluInfo, a Softmax info: ``dim`` (cut into the two halves) cannot be split, every other
    dimension can, and the output keeps the input's layout (its ``dim`` half as long)."""
    ins, _ = shapes_of(node, graph)
    rank = len(ins[0])
    labels = tuple(f"d{i}" for i in range(rank))
    dim = node.static_args.get(1, -1)
    return DimSpec((labels,), (labels,), labels, frozenset({labels[dim % rank]}) if rank else frozenset())
