"""Sequence parallel in the stage search: each tensor-group size's two priced layer variants.

Megatron's sequence parallel (MindFormers' ``use_seq_parallel``) splits the layer's token regions (LayerNorm,
residual Add, dropout: the ops between the tensor-parallel matmuls) over the tensor group: their activations are
``1/tp`` as big, and the AllReduce that ends each tensor-parallel block becomes a ReduceScatter onto the rows with
an AllGather before the next one (the same ring bytes, one more message). Whether it pays depends on the layer and
the budget, so the search prices both: the profile (``compile.plans.stage_profile.layer_variants``) plans the
layer on each group with the intra-op search and once more with its token regions forced the other way
(``compile.plans.stage_sequence``), and :class:`~.model.LayerCost` records which one each is
(``seq_parallel``, read from the plan). Every figure of a variant (activations kept per stage, collectives and
their messages, FLOPs) is that variant's own plan's, so nothing here is a formula: a shape is priced with the
variant it names (:attr:`~.model.Shape.seq_parallel`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from graphpar.planner.stages.model import LayerCost, Shape


def variants(layers: Mapping[tuple[int, int], LayerCost], sequence: Mapping[tuple[int, int], LayerCost],
             shape: Shape, bounded: Mapping[tuple[int, int], tuple[LayerCost, ...]] | None = None
             ) -> Iterator[tuple[Shape, LayerCost]]:
    """The shape with each layer variant priced for its (tensor group, micro-batch): plain tensor parallel first,
    then sequence parallel, then the weight-bounded plans (``bounded``, ``compile.plans.stage_weights``) in their
    order (a fixed order, so ties keep the first and the search stays deterministic)."""
    key = (shape.tp, shape.micro)
    found = [c for c in (layers.get(key), sequence.get(key)) if c is not None]
    found = sorted(found, key=lambda c: c.seq_parallel) + list((bounded or {}).get(key, ()))
    for layer in found:
        yield dataclasses.replace(shape, seq_parallel=layer.seq_parallel and shape.tp > 1,
                                  weight_bound=layer.weight_bound), layer


def activation_cut(plain: LayerCost, split: LayerCost) -> float:
    """The fraction of one layer's per-stage activations that sequence parallel removes, measured on the two
    plans (what each keeps per micro-batch in a pipeline stage)."""
    before = plain.stage_activation_bytes if plain.stage_activation_bytes is not None else plain.activation_bytes
    after = split.stage_activation_bytes if split.stage_activation_bytes is not None else split.activation_bytes
    return 1.0 - after / before if before else 0.0
