"""Megatron's sequence parallel in the stage search (issue 25): the layer's two variants, priced from their plans.

Read as the API: with ``auto_pipeline=True`` the stage search profiles the repeated layer on each tensor group as
the intra-op search plans it and once more with its token regions (LayerNorm, residual Adds: the ops between the
tensor-parallel matmuls) forced the other way, split over the group or whole on every device
(``compile.plans.stage_sequence``); a plan says which it priced (``best.shape.seq_parallel``, "tp 4 (sequence
parallel)" in the summary, ``"sequence_parallel"`` in ``--json`` and the strategy file), and the strategy file's
layer strategies carry the split, so ``load_pipeline_plan(path).apply(net)`` runs it.
"""

from __future__ import annotations

import collections
import dataclasses
import json

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import find_layers, layer_variants
from graphpar.dump.hlo import parse_collectives
from graphpar.models.gpt import ALL, GPT, NONE, gpt_data
from graphpar.parallel import load_pipeline_plan
from graphpar.planner.stages import Cluster, EdgeCost, Shape, assign
from graphpar.planner.stages.model import in_flight, stage_memory
from graphpar.planner.stages.report import differences
from graphpar.planner.stages.sequence import activation_cut
from tests.search.test_stage_plan_e2e import _search, _train, stage_memory as compiled_memory

SEQ, HIDDEN = 32, 128
TOKENS = SEQ * HIDDEN * 4  # one micro-batch's (seq, hidden) float32 activation: what a LayerNorm reads


@pytest.fixture(scope="module")
def megatron_variants():
    """Megatron's GPT layer (column- then row-parallel matmuls over mp 4, LayerNorm and residual rows whole on each
    device: ``hints=ALL``) profiled on a tensor group of 4 for one sequence per micro-batch, both variants."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    net = nn.WithLossCell(GPT(1, 4, ALL, seq=SEQ, hidden=HIDDEN, heads=4, vocab=512, layers=2),
                          nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    ids, labels = gpt_data(4, SEQ, 512)
    graph, _ = trace_network(NetworkState(net, net.trainable_params()), [ids, labels], "train")
    plain, split = layer_variants(find_layers(net, graph), 4, [4], [1], Cluster.for_platform(8, "cpu", None), 1.0,
                                  mode="semi_auto_parallel")
    ms.reset_auto_parallel_context()
    return plain[(4, 1)], split[(4, 1)]


def test_sequence_parallel_cuts_a_tp4_stages_activations_by_the_measured_fraction_keeps_bytes_adds_messages(
        megatron_variants):
    plain, split = megatron_variants
    assert (plain.seq_parallel, split.seq_parallel) == (False, True)
    # what a stage keeps per layer: the two LayerNorms' inputs (the residual stream) are split 4 ways, the
    # column-parallel matmuls still read their rows whole (gathered): 2 x 3/4 of a (seq, hidden) activation
    assert plain.stage_activation_bytes - split.stage_activation_bytes == 2 * TOKENS * 3 / 4
    cut = activation_cut(plain, split)
    assert cut == pytest.approx(2 * TOKENS * 3 / 4 / plain.stage_activation_bytes)
    # a pp 2 x tp 4 stage holding 2 layers, 4 micro-batches: the resident activations of the micro-batches in
    # flight shrink by that fraction, and the backward (one layer's walked peak, and what the other layer still
    # holds: ``LayerCost.stage_backward``) by what the walk finds; nothing else moves
    shape = Shape(2, 4, 1, 4, 1)
    sp = dataclasses.replace(shape, seq_parallel=True)
    kept = in_flight(shape, 0) * 2 * plain.stage_activation_bytes
    walked = sum(plain.stage_backward) - sum(split.stage_backward)
    assert walked > 0
    before = stage_memory(shape, 0, 2, plain, EdgeCost(), EdgeCost(), 1.0, False)
    after = stage_memory(sp, 0, 2, split, EdgeCost(), EdgeCost(), 1.0, False)
    assert before - after == pytest.approx(cut * kept + walked)
    # the wire bytes within the tensor group: each row-parallel AllReduce is a ReduceScatter, each column-parallel
    # entry an AllGather (with its backward's AllReduce, a ReduceScatter where XLA fuses it with the slice), the
    # same ring bytes, except what the plan adds: q, k and v each gather the first LayerNorm's rows (priced per
    # reader: 2 more AllGathers), and the LayerNorms' and row-parallel biases' weight gradients, partial over
    # the split rows, are all-reduced over the group (Megatron's sequence-parallel gradient reduction): 6 weights
    # of (hidden,); each a message of its own
    gather = TOKENS * 3 / 4
    weights = 6 * HIDDEN * 4 * 2 * 3 / 4
    assert split.comm_bytes == plain.comm_bytes + 2 * gather + weights
    assert (plain.messages, split.messages) == (6, 16)
    assert (split.weight_bytes, split.flops <= plain.flops) == (plain.weight_bytes, True)


def test_the_search_prices_both_variants_and_says_what_separates_them(megatron_variants):
    plain, split = megatron_variants
    cluster = Cluster(devices=8, memory=None)
    shape = Shape(2, 4, 1, 4, 1)
    a = assign(shape, 4, plain, EdgeCost(), EdgeCost(), cluster, 1.0)
    b = assign(dataclasses.replace(shape, seq_parallel=True), 4, split, EdgeCost(), EdgeCost(), cluster, 1.0)
    assert max(b.stage_memory) < max(a.stage_memory)
    assert "tp 4 (sequence parallel)" in b.describe() and "sequence parallel" not in a.describe()
    assert "sequence parallel False (not True)" in differences(a, b)


def _gpt():
    net = GPT(1, 1, NONE, seq=SEQ, hidden=HIDDEN, heads=4, vocab=512, layers=4)
    return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three pipelined runs (sequence parallel, plain, STAND_ALONE): minutes on a busy machine
def test_a_budget_only_sequence_parallel_meets_is_planned_with_it_and_trains_as_stand_alone(tmp_path):
    """The searched GPT: at 0.00165GB the fastest plan that fits is plain tensor parallel (pp 2 x tp 4, 16
    micro-batches of 1, interleaved 1F1B with 2 chunks: 1,763,328 B predicted on its fuller stage); at 0.0016GB none
    does, and the same shape with sequence parallel (1,689,408 B) is planned (it keeps less per micro-batch and pays
    more collectives). It trains from the strategy
    file with STAND_ALONE's losses, each stage's compiled peak within 10 % of the prediction (measured 0.949 and 0.952), and its programs gather the token rows over the tensor group before the
    column-parallel matmuls."""
    path = tmp_path / "sp.json"
    inputs = gpt_data(16, SEQ, 512)
    roomier = _search(_gpt, inputs, "0.00165GB", tmp_path / "plain.json")
    assert not roomier.shape.seq_parallel
    best = _search(_gpt, inputs, "0.0016GB", path)
    assert best.shape == dataclasses.replace(roomier.shape, seq_parallel=True)
    assert max(best.stage_memory) <= 0.0016 * 2 ** 30 < max(roomier.stage_memory)
    plan = load_pipeline_plan(str(path))
    assert plan.sequence_parallel
    saved = json.loads(path.read_text())
    assert saved["graphpar"]["pipeline"]["sequence_parallel"] is True
    norms = [s["in_strategy"][0] for s in saved["graphpar"]["strategies"].values() if s["kind"] == "LayerNorm"
             and "layernorm" in s["scope"]]
    assert norms and all(row[0] == best.shape.tp * best.shape.dp for row in norms)  # the token rows split
    got, cell = _train(_gpt, inputs, plan.micro_batches, plan)
    for s, (pred, comp) in enumerate(zip(best.stage_memory, compiled_memory(cell))):
        print(f"stage {s}: predicted {pred:.0f} B, compiled {comp} B ({pred / comp:.3f})")
        assert 0.9 * comp <= pred <= 1.1 * comp
    sp = _forward_collectives(cell, best.shape.tp)
    # the plain plan of the same shape (0.00165GB's) run the same way: sequence parallel gathers the LayerNorm rows
    # into the column-parallel matmuls, at least one more all-gather per layer (XLA:CPU keeps the row-parallel
    # exit's all-reduce and slices it: GPU/TPU form the reduce-scatter, so no all-reduce is added)
    plain = load_pipeline_plan(str(tmp_path / "plain.json"))
    assert not plain.sequence_parallel
    _, plain_cell = _train(_gpt, inputs, plain.micro_batches, plain, steps=1)
    tp_plain = _forward_collectives(plain_cell, best.shape.tp)
    print(f"forward collectives per stage: sequence parallel {sp}, plain {tp_plain}")
    # measured (2 stages x 2 chunks of 1 layer): 3, 3, 3, 4 all-gathers against 2, 2, 2, 3; all-reduces 7 both
    # (one entry per stage program: with interleaved 1F1B one per chunk, so the layers are counted over all of them)
    total = lambda counts, kind: sum(c[kind] for c in counts)  # noqa: E731
    assert total(sp, "AllGather") >= total(tp_plain, "AllGather") + sum(best.layers)
    assert total(sp, "AllReduce") <= total(tp_plain, "AllReduce")
    want, _ = _train(_gpt, inputs, plan.micro_batches)
    print(f"losses {got} (STAND_ALONE {want})")
    np.testing.assert_allclose(got, want, rtol=1e-5)


def _forward_collectives(cell, tp: int) -> list[collections.Counter]:
    """Per stage, the collectives over ``tp`` devices its compiled forward program holds, by kind."""
    built = next(iter(cell.program._built.values()))
    return [collections.Counter(c.kind for c in parse_collectives(st.compiled["forward"].as_text(), 8)
                                if len(c.groups[0]) == tp) for st in built.stages]
