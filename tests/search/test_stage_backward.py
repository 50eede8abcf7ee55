"""What a pipeline stage's backward program holds besides its arguments, as the stage search prices it (issue 25).

A stage program differentiates its layers one after another, so it holds one layer's cotangents (and, recomputed,
its replayed activations) at their peak, walked on the layer's plan (``LayerCost.stage_backward``: peak, and what
the layer still holds when its backward ends: what its weight gradients read, which XLA makes last). The
dp-reduced gradients are counted once per phase, in the form they have then: none while the layers are
differentiated, one buffer each while the weight gradients are made, two at their reduction. The whole stage is
checked against XLA's compiled stage programs in the slow tests ``test_stage_moe_memory.py`` and
``test_stage_plan_e2e.py``.
"""

from __future__ import annotations

import pytest

from graphpar.planner.stages import EdgeCost, LayerCost, Shape
from graphpar.planner.stages.model import backward_pieces, fixed_memory, layer_memory, stage_memory

MB = 1e6


def _layer(**kw) -> LayerCost:
    base = dict(tp=1, micro=1, flops=1e9, comm_bytes=0.0, messages=0, weight_bytes=4 * MB, activation_bytes=8 * MB,
                boundary_bytes=1 * MB, transient_bytes=2 * MB, stage_activation_bytes=8 * MB,
                stage_input_bytes=1 * MB, stage_cotangent_bytes=6 * MB, largest_weight_bytes=1 * MB,
                stage_backward=(5 * MB, 2 * MB), stage_recompute_backward=(9 * MB, 3 * MB))
    return LayerCost(**{**base, **kw})


def _backward(shape: Shape, layers: int, layer: LayerCost, recompute: bool = False) -> float:
    """The backward's part of the stage's peak: the whole less the resident bytes."""
    resident = fixed_memory(shape, 1, layer, EdgeCost(), EdgeCost(), 1.0, recompute)
    resident += layers * layer_memory(layer, shape, 1, recompute, 1.0)
    return stage_memory(shape, 1, layers, layer, EdgeCost(), EdgeCost(), 1.0, recompute) - resident


def test_a_stage_program_holds_one_layers_backward_peak_and_what_the_layers_before_it_still_hold():
    shape = Shape(stages=4, tp=1, dp=1, micro_batches=1, micro=1)  # one micro-batch, no dp: no gradient held
    layer = _layer()
    # one layer: its walked peak (not a cotangent for each of its 6 MB of kept activations, nor the transient)
    assert _backward(shape, 1, layer) == pytest.approx(5 * MB)
    # three layers in one program: the peak of the last differentiated, and 2 MB still held by each other one
    assert _backward(shape, 3, layer) == pytest.approx(5 * MB + 2 * 2 * MB)
    # recomputed: the walk with the replayed activations
    assert _backward(shape, 3, layer, recompute=True) == pytest.approx(9 * MB + 2 * 3 * MB)
    # interleaved with 3 chunks: each program runs a third of the stage's layers; with 3 micro-batches and no dp,
    # the largest parameter's gradient (1 MB) is made before it is added to the accumulator
    assert _backward(Shape(4, 1, 1, 3, 1, chunks=3), 3, layer) == pytest.approx(5 * MB + 1 * MB)


def test_the_dp_reduced_gradients_are_counted_once_in_the_form_they_have_in_each_phase():
    shape = Shape(stages=4, tp=1, dp=4, micro_batches=4, micro=1)
    layer = _layer()
    layers_phase, weights_phase, reduction = backward_pieces(shape, 1, layer, EdgeCost(), EdgeCost(), False)
    # the layers differentiated: no gradient made yet (XLA makes the weight gradients last)
    assert layers_phase == pytest.approx((3 * MB, 2 * MB))
    # the weight gradients made: what they read (held to the end) and one buffer per gradient
    assert weights_phase == pytest.approx((0.0, 2 * MB + 4 * MB))
    # the reduction: two buffers per gradient, nothing else
    assert reduction == pytest.approx((0.0, 8 * MB))
    # two layers: the reduction's 16 MB is the peak, the gradients are not also added to the cotangents
    assert _backward(shape, 2, layer) == pytest.approx(16 * MB)


def test_without_a_walked_layer_every_cotangent_and_the_gradients_are_counted_at_once():
    # a layer priced without its plan's walk (or a program without stages) keeps the bound: every cotangent,
    # recomputed twice, the largest transient buffer and the gradients made
    shape = Shape(stages=4, tp=1, dp=4, micro_batches=4, micro=1)
    layer = _layer(stage_backward=None, stage_recompute_backward=None)
    assert _backward(shape, 2, layer) == pytest.approx(2 * MB + 2 * (6 * MB + 4 * MB))
    assert _backward(shape, 2, layer, recompute=True) == pytest.approx(2 * MB + 2 * (12 * MB + 4 * MB))
