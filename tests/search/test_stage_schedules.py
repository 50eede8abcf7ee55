"""The stage search's schedule model against the schedules the pipeline runtime runs (issue 25).

``planner.stages.schedules`` prices each schedule by closed forms (the planner sits below the runtime and a search
prices thousands of shapes); here the runtime's own tables (``compile.pipeline.schedule_virtual.schedule_orders``)
are built for several stage counts p, chunks per stage v and micro-batch counts m, and every figure is checked
against them: the step's length in stage-times from the runtime's timeline (``schedule_cost``) under several
forward : backward ratios, the chunk-activations each group holds at once (``peak_in_flight``), what the first and
last chunks hold, and the transfers between groups.
"""

import pytest

from graphpar.compile.pipeline.schedule import VirtualLayout, peak_in_flight
from graphpar.compile.pipeline.schedule_cost import ScheduleCosts, schedule_timeline
from graphpar.compile.pipeline.schedule_virtual import schedule_orders
from graphpar.planner.stages import Cluster, EdgeCost, LayerCost, Shape, assign
from graphpar.planner.stages.report import differences, plan_data
from graphpar.planner.stages.schedules import (boundary_crossings, bubble, chunk_in_flight, chunk_layers,
                                               edge_in_flight, pipeline_length, schedule_options)
from graphpar.planner.stages.search import shapes

CASES = [("1f1b", p, v, m) for p in (2, 3, 4, 8) for v in (1, 2, 3, 4) for m in (p, 2 * p, 3 * p)]
CASES += [("gpipe", p, 1, m) for p in (2, 3, 4, 8) for m in (p, 2 * p, 3 * p)]  # one chunk per stage


def _runtime(schedule, p, v, m):
    layout = VirtualLayout(p, v)
    return schedule_orders(schedule, layout, m), layout


@pytest.mark.parametrize("schedule,p,v,m", CASES)
def test_length_and_in_flight_equal_the_runtime_tables(schedule, p, v, m):
    orders, layout = _runtime(schedule, p, v, m)
    for f, b in ((1, 2), (1, 1), (2, 1), (1, 3)):  # per stage; the runtime gives each chunk 1 / v of it
        timeline = schedule_timeline(orders, layout, ScheduleCosts(f, b, 0))
        assert timeline.length / (f + b) == pytest.approx(pipeline_length(p, v, m))
        assert timeline.idle_total == pytest.approx(bubble(p, v, m))
    assert [peak_in_flight(o) for o in orders] == [chunk_in_flight(schedule, p, v, m, s) for s in range(p)]
    # the first chunk (segment 0 of group 0) and the last (segment v - 1 of group p - 1): what the edges keep
    for group, segment, first in ((0, 0, True), (p - 1, v - 1, False)):
        live = peak = 0
        for a in orders[group]:
            if a.segment == segment:
                live += 1 if a.kind == "F" else -1
                peak = max(peak, live)
        assert peak == edge_in_flight(schedule, p, v, m, first)


def test_interleaving_shrinks_the_bubble_v_times_and_holds_more_micro_batches():
    # 4 stages, 8 micro-batches: 1F1B 3 / 11; 2 chunks 3 / 19; group 0 holds 11 half-stage chunks (5.5 stages'
    # worth) instead of 4 micro-batches
    assert bubble(4, 1, 8) == pytest.approx(3 / 11) and bubble(4, 2, 8) == pytest.approx(3 / 19)
    assert [chunk_in_flight("1f1b", 4, 2, 8, s) for s in range(4)] == [11, 9, 7, 5]


@pytest.mark.parametrize("p,v", [(2, 2), (3, 2), (4, 2), (4, 3), (2, 4)])
def test_transfers_equal_the_chunk_boundaries_between_groups(p, v):
    layout = VirtualLayout(p, v)
    for s in range(p):
        crossings = sum((c > 0) + (c < layout.chunks - 1) for c in range(layout.chunks) if layout.place(c)[0] == s)
        assert boundary_crossings(p, v, s) == crossings


def test_chunk_layers_follow_the_runtime_layout_with_contiguous_layers():
    # 10 layers on 2 stages (6 and 4), 2 chunks each: chunk c is segment c // 2 of stage c % 2
    chunks = chunk_layers((6, 4), 2)
    assert chunks == [(0, 0, 3), (1, 0, 2), (0, 1, 3), (1, 1, 2)]
    layout = VirtualLayout(2, 2)
    assert [layout.place(c) for c in range(4)] == [(g, s) for g, s, _ in chunks]
    # an uneven stage: its extra layer on its later segment (which holds fewer micro-batches)
    assert chunk_layers((5,), 2) == [(0, 0, 2), (0, 1, 3)]


def test_the_search_enumerates_interleaving_only_where_the_runtime_runs_it():
    assert list(schedule_options(4, 8, 16, ("1f1b", "gpipe"))) == [("1f1b", 1), ("1f1b", 2), ("1f1b", 3),
                                                                    ("1f1b", 4), ("gpipe", 1)]
    assert list(schedule_options(4, 6, 16, ("1f1b",))) == [("1f1b", 1)]  # micro-batches in rounds of 4
    assert list(schedule_options(4, 8, 8, ("1f1b",))) == [("1f1b", 1), ("1f1b", 2)]  # a layer per chunk
    assert list(schedule_options(1, 8, 8, ("1f1b",))) == [("1f1b", 1)]
    found = list(shapes(Cluster(8), 8, 32, [4], [2]))
    assert {s.chunks for s in found if s.stages == 4 and s.micro_batches == 8} == {1, 2}
    assert all(s.micro_batches % s.stages == 0 and s.stages * s.chunks <= 8 for s in found if s.chunks > 1)


LAYER = LayerCost(tp=1, micro=1, flops=1e12, comm_bytes=0.0, messages=0, weight_bytes=1e6, activation_bytes=1e6,
                  boundary_bytes=1e5)


def test_the_price_of_interleaving_shorter_fill_and_drain_more_sends_and_activations():
    cluster = Cluster(8)
    plain = assign(Shape(8, 1, 1, 16, 1), 16, LAYER, EdgeCost(), EdgeCost(), cluster, 2.0)
    inter = assign(Shape(8, 1, 1, 16, 1, chunks=2), 16, LAYER, EdgeCost(), EdgeCost(), cluster, 2.0)
    assert plain.layers == inter.layers == (2,) * 8
    sends = cluster.hw.alpha + cluster.inter_beta * LAYER.boundary_bytes
    assert inter.stage_time[1] - plain.stage_time[1] == pytest.approx(2 * sends)  # 4 crossings, not 2
    assert inter.step_time == pytest.approx((16 + 7 / 2) * max(inter.stage_time))
    assert plain.step_time == pytest.approx((16 + 7) * max(plain.stage_time))
    # group 0 holds 2 * 7 + 8 + 1 = 23 half-stage chunks (11.5 micro-batches' worth) instead of 8; its backward
    # program runs one chunk of 1 layer, not 2 (one layer's cotangents less)
    extra = (23 / 2 - 8) * 2 * LAYER.activation_bytes
    assert inter.stage_memory[0] - plain.stage_memory[0] == pytest.approx(extra - LAYER.activation_bytes, rel=1e-6)
    # a stage of one layer cannot hold two chunks
    assert assign(Shape(8, 1, 1, 16, 1, chunks=2), 8, LAYER, EdgeCost(), EdgeCost(), cluster, 2.0) is None


def test_the_report_and_json_name_the_schedule_its_chunks_and_what_interleaving_buys():
    cluster = Cluster(8)
    plain = assign(Shape(4, 1, 2, 8, 1), 8, LAYER, EdgeCost(), EdgeCost(), cluster, 2.0)
    inter = assign(Shape(4, 1, 2, 8, 1, chunks=2), 8, LAYER, EdgeCost(), EdgeCost(), cluster, 2.0)
    data = plan_data(inter)
    assert (data["schedule"], data["pipeline_interleave"], data["chunks_per_stage"]) == ("1f1b", True, 2)
    # chunk c is segment c // 4 of stage c % 4: stage 0 holds layers 0 and 4
    assert data["chunk_layers"] == [[s, g, 1] for g in range(2) for s in range(4)]
    assert data["bubble"] == pytest.approx(3 / 19)
    assert "interleaved 1f1b (2 chunks)" in inter.describe()
    assert differences(plain, inter).startswith("chunks per stage 1 (not 2)")
    assert "pipeline 11 x slowest stage" in differences(plain, inter)
