"""Sharding rules of ``graphpar.ops.random_extra_ops``: UniformReal's and Gamma's samples split on any dim (the
key stays whole; each device draws its own block of the one global draw), Gamma's ``alpha``/``beta`` broadcast
against them; RandomChoiceWithMask splits nothing (MindSpore's RandomChoiceWithMaskInfo)."""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, elementwise, register, shapes_of


@register("UniformReal", "Gamma")
def _sampler(node, graph):
    ins, outs = shapes_of(node, graph)
    spec = elementwise(ins[1:], outs)
    return DimSpec((tuple(None for _ in ins[0]),) + spec.inputs, spec.outputs, spec.order)


@register("RandomChoiceWithMask")
def _random_choice_with_mask(node, graph):
    ins, outs = shapes_of(node, graph)
    return DimSpec(tuple(tuple(None for _ in s) for s in ins), tuple(tuple(None for _ in s) for s in outs), ())


@register("DropoutGenMask")
def _dropout_gen_mask(node, graph):
    """The packed mask is one draw, whole on every device (a split DropoutDoMask slices it locally)."""
    ins, outs = shapes_of(node, graph)
    return DimSpec(tuple(tuple(None for _ in s) for s in ins), tuple(tuple(None for _ in s) for s in outs), ())


@register("DropoutDoMask")
def _dropout_do_mask(node, graph):
    """MindSpore's DropoutDoMaskInfo: input_x and the output split alike; the mask and keep_prob stay whole."""
    ins, outs = shapes_of(node, graph)
    spec = elementwise(ins[:1], outs)
    return DimSpec(spec.inputs + tuple(tuple(None for _ in s) for s in ins[1:]), spec.outputs, spec.order)


@register("UniformCandidateSampler")
def _uniform_candidate_sampler(node, graph):
    """MindSpore's UniformCandidateSamplerInfo: true_classes and the true expected counts split alike; the
    candidates and their counts are whole; with remove_accidental_hits true_classes cannot be split."""
    ins, outs = shapes_of(node, graph)
    whole = node.attrs.get("remove_accidental_hits", False)
    labels = tuple(None if whole else f"d{i}" for i in range(len(ins[0])))
    return DimSpec((labels, (None,) * len(ins[1])), ((None,), labels, (None,)), tuple(l for l in labels if l))
