"""Each pass of the planning pipeline (``graphpar.planner.planning``) called directly on a traced graph: what it
reads, what it adds, what it leaves alone, and the errors it raises."""

import dataclasses
import re

import jax.numpy as jnp
import pytest

from graphpar import Parameter, Tensor, nn, ops
from graphpar.errors import ConfigError, StrategyError
from graphpar.planner.passes.defaults import default_strategies
from graphpar.planner.passes.hints import apply_hints
from graphpar.planner.passes.mesh_choice import choose_mesh
from graphpar.planner.passes.parameters import place_parameters
from graphpar.planner.passes.propagate import propagate
from graphpar.planner.passes.recorded import apply_strategy_file, check_strategy_file
from graphpar.planner.passes.redistributions import report_redistributions
from graphpar.planner.passes.verify import PlanInvariantError, verify
from graphpar.planner.search.search_pass import search
from graphpar.planner.strategy import MeshInfo, hint_device_matrix
from graphpar.planner.strategy_file import ParameterLayout, RecordedStrategy, StrategyFile, node_keys

from .helpers import rand
from .passes_helpers import QUICKSTART_HINT, in_strategies, node, provenances, quickstart, run, traced, with_request

SCOPE = "Default/network-WithLossCell/_backbone-QuickstartNet"
DATA_PARALLEL = {"relu": ((8, 1),), "matmul2": ((8, 1), (1, 1)), "sub": ((8, 1), (8, 1)), "square": ((8, 1),),
                 "reduce_mean": ((8, 1),)}


def test_traced_graph_and_context_are_the_quickstarts():
    graph, ctx = quickstart()
    assert [(n.kind, n.instance_name) for n in graph.node_list()] == [
        ("MatMul", "matmul"), ("ReLU", "relu"), ("MatMul", "matmul2"), ("Sub", "sub"), ("Square", "square"),
        ("ReduceMean", "reduce_mean")]
    assert all(n.strategy is None and n.provenance is None for n in graph.node_list())
    assert (ctx.mesh.names, ctx.mesh.sizes) == (("m0", "m1", "m2"), (2, 2, 2))
    assert (ctx.mode, ctx.search_mode) == ("auto_parallel", "sharding_propagation")
    assert ctx.input_specs == {2: (("m0", "m1", "m2"), ()), 3: (("m0", "m1", "m2"), ())}  # dataset data_parallel


def test_choose_mesh_expresses_the_hints_and_keeps_a_programs_mesh():
    graph, ctx = quickstart()
    assert (graph.plan.mesh, graph.plan.purpose) == (ctx.mesh, "train")
    assert list(graph.plan.pass_seconds) == ["read_hints", "choose_mesh", "dataset_layouts"]
    assert hint_device_matrix(ctx.dims(node(graph, "matmul"), graph), QUICKSTART_HINT, 8) == (2, 4, 1)
    assert choose_mesh(graph, ctx).plan.mesh == ctx.mesh  # the program's own mesh: kept
    other = graph.with_plan(mesh=MeshInfo(("m0", "m1"), (4, 2)))
    with pytest.raises(ConfigError, match="graphpar keeps one mesh per program"):
        choose_mesh(other, ctx)


def test_apply_hints_sets_the_hinted_strategy_with_provenance_user():
    graph, ctx = quickstart()
    out = apply_hints(graph, ctx)
    matmul = node(out, "matmul")
    assert matmul.strategy.in_strategy() == ((2, 4), (4, 1)) and matmul.provenance.kind == "user"
    assert matmul.strategy.axes == {"i": ("m0",), "k": ("m1", "m2")} and matmul.strategy.device_matrix() == (2, 4, 1)
    assert {k: v for k, v in in_strategies(out).items() if k != "matmul"} == dict.fromkeys(
        ["relu", "matmul2", "sub", "square", "reduce_mean"])
    assert node(graph, "matmul").strategy is None  # the input graph is left as it was


def test_apply_hints_refuses_a_hint_that_cannot_hold():
    graph, ctx = quickstart(((2, 4), (2, 1)))  # the contracted dimension split 4 ways on x, 2 ways on w
    with pytest.raises(StrategyError, match="matmul"):
        apply_hints(graph, ctx)


def _recorded(graph, name, in_strategy, path="recorded.ckpt", device_num=8, layouts=None):
    keys = node_keys(graph)
    n = node(graph, name)
    key = keys[n.id]
    return StrategyFile(path, device_num, {key: RecordedStrategy(key, n.kind, name, n.scope, in_strategy, None)},
                        layouts or {})


def test_apply_strategy_file_forces_the_recorded_strategies():
    graph, ctx = quickstart()
    ctx = with_request(ctx, strategy_file=_recorded(graph, "matmul2", ((2, 2), (2, 2))))
    out = run(graph, ctx, apply_hints, apply_strategy_file)
    matmul2 = node(out, "matmul2")
    assert matmul2.strategy.in_strategy() == ((2, 2), (2, 2))
    assert (matmul2.provenance.kind, matmul2.provenance.detail) == ("user", "strategy file recorded.ckpt")
    assert node(out, "matmul").strategy.in_strategy() == ((2, 4), (4, 1))  # not in the file: its hint stays
    assert node(out, "relu").strategy is None


def test_apply_strategy_file_refuses_a_file_of_another_device_count_and_does_nothing_without_one():
    graph, ctx = quickstart()
    assert apply_strategy_file(graph, ctx) is graph
    ctx = with_request(ctx, strategy_file=_recorded(graph, "matmul2", ((2, 2), (2, 2)), device_num=4))
    with pytest.raises(ConfigError, match="written for 4 devices but this job plans for 8"):
        apply_strategy_file(graph, ctx)


def test_propagate_gives_the_quickstarts_relu_and_matmul2():
    graph, ctx = quickstart()
    out = run(graph, ctx, apply_hints, propagate)
    matmul, relu, matmul2 = node(out, "matmul"), node(out, "relu"), node(out, "matmul2")
    assert relu.strategy.in_strategy() == ((2, 4),)
    assert (relu.provenance.kind, relu.provenance.source) == ("propagated", matmul.id)
    assert matmul2.strategy.in_strategy() == ((2, 4), (4, 1))
    assert (matmul2.provenance.kind, matmul2.provenance.source) == ("propagated", relu.id)
    assert matmul.provenance.kind == "user"  # a configured node is never changed
    # the loss takes the dataset's layout of the label: split 8 ways on the batch
    assert in_strategies(out)["sub"] == ((8, 1), (8, 1)) and node(out, "sub").provenance.source == matmul2.id


def test_propagate_in_mindspores_order_chooses_the_loss_from_matmul2():
    """``propagation_order="mindspore"``: the loss's Sub reads matmul2 and the label, so it waits for both edges; when
    the MatMul's walk runs dry it is chosen from the edge reached (MindSpore's ``GetStrategyByVisitedEdges``), the
    label's dataset layout being priced only in the dataset's walk, last; in the loss tail fewer collectives decide:
    matmul2's layout. The relu and matmul2 are the same in both orders."""
    graph, ctx = quickstart()
    out = run(graph, with_request(ctx, propagation_order="mindspore"), apply_hints, propagate)
    assert in_strategies(out)["relu"] == ((2, 4),) and in_strategies(out)["matmul2"] == ((2, 4), (4, 1))
    sub = node(out, "sub")
    assert in_strategies(out)["sub"] == ((2, 1), (2, 1)) and sub.provenance.source == node(out, "matmul").id


def test_propagate_without_a_configured_op_starts_from_the_dataset():
    # MindSpore's _VirtualDataset is a configured op under sharding propagation: with no shard() anywhere, the ops
    # reading the batch are chosen against its data-parallel layout and the rest follow
    graph, ctx = quickstart(hint=None)
    out = propagate(graph, ctx)
    assert in_strategies(out)["matmul"] == ((8, 1), (1, 1))
    assert node(out, "matmul").provenance.detail == "from the dataset layout"
    assert {k: in_strategies(out)[k] for k in DATA_PARALLEL} == DATA_PARALLEL
    with pytest.raises(StrategyError, match="nothing to propagate from"):
        propagate(graph, dataclasses.replace(ctx, input_specs={}))


def test_default_strategies_give_mindspores_batch_split_and_keep_decided_nodes():
    graph, ctx = quickstart(parallel_mode="semi_auto_parallel")
    out = run(graph, ctx, apply_hints, default_strategies)
    assert in_strategies(out) == {"matmul": ((2, 4), (4, 1)), **DATA_PARALLEL}
    assert provenances(out) == {"matmul": "user", **dict.fromkeys(DATA_PARALLEL, "default")}
    assert node(out, "relu").provenance.detail == "data parallel"
    assert node(out, "relu").strategy.axes == {"d0": ("m0", "m1", "m2")}  # the batch over every mesh axis, in order


def test_default_strategies_replicate_a_primitive_without_a_rule(notices):
    class Spectrum(nn.Cell):
        def __init__(self):
            super().__init__()
            self.relu = ops.ReLU().shard(((8, 1),))

        def construct(self, x):
            return jnp.real(jnp.fft.fft(self.relu(x), axis=-1))

    graph, ctx = traced(Spectrum(), (16, 8), (16, 8), parallel_mode="semi_auto_parallel")
    out = run(graph, ctx, apply_hints, default_strategies)
    fft = next(n for n in out.node_list() if n.kind == "fft")
    assert fft.provenance.kind == "fallback" and fft.provenance.detail == "no sharding rule for 'fft': replicated"
    assert fft.strategy.axes == {} and fft.strategy.input_spec(0) == ((), ())
    assert "no sharding rule for primitive 'fft'" in notices.text


def test_place_parameters_gives_every_graph_input_its_layout():
    graph, ctx = quickstart()
    out = run(graph, ctx, apply_hints, propagate, default_strategies, place_parameters)
    specs = out.plan.value_specs
    assert set(specs) == set(out.inputs)
    names = {out.values[v].name: v for v in out.inputs}
    assert specs[names["w"]] == node(out, "matmul").strategy.input_spec(1) == (("m1", "m2"), ())
    assert specs[names["w2"]] == node(out, "matmul2").strategy.input_spec(1) == (("m1", "m2"), ())
    assert specs[names["input0"]] == specs[names["input1"]] == (("m0", "m1", "m2"), ())  # the dataset layouts
    assert out.plan.param_conflicts == ()
    assert not graph.plan.value_specs


class SharedWeight(nn.Cell):
    def __init__(self, second_hint):
        super().__init__()
        self.weight = Parameter(Tensor(rand(16, 16, seed=1)), "w")
        self.first = ops.MatMul().shard(((2, 1), (1, 4)))
        self.second = ops.MatMul() if second_hint is None else ops.MatMul().shard(second_hint)

    def construct(self, x):
        return self.second(self.first(x, self.weight), self.weight)


def test_place_parameters_stores_a_shared_parameter_where_it_costs_least_and_reports_it():
    graph, ctx = traced(SharedWeight(None), (16, 16), (16, 16), parallel_mode="semi_auto_parallel")
    out = run(graph, ctx, apply_hints, default_strategies, place_parameters)
    (conflict,) = out.plan.param_conflicts
    first, second = node(out, "first"), node(out, "second")
    wanted = {first.strategy.input_spec(1), second.strategy.input_spec(1)}
    assert conflict["parameter"] == "w" and {s for _, _, s in conflict["wanted"]} == wanted and len(wanted) == 2
    assert conflict["chosen"] == out.plan.value_specs[out.inputs[0]] == second.strategy.input_spec(1) == ((), ())
    assert conflict["cost_bytes"] == 0  # slicing the replicated weight for `first` is free


def test_place_parameters_refuses_two_hinted_ops_that_disagree_on_a_shared_parameter():
    graph, ctx = traced(SharedWeight(((2, 4), (4, 1))), (16, 16), (16, 16), parallel_mode="semi_auto_parallel")
    with pytest.raises(StrategyError, match="a shared Parameter needs one layout"):
        run(graph, ctx, apply_hints, default_strategies, place_parameters)


def test_check_strategy_file_warns_for_a_parameter_stored_otherwise_than_recorded(notices):
    graph, ctx = quickstart()
    layout = ParameterLayout([8, 1], [-1, -1], [32, 16], mesh_spec=[[], []])
    ctx = with_request(ctx, strategy_file=_recorded(graph, "matmul", ((2, 4), (4, 1)), layouts={"w": layout}))
    planned = run(graph, ctx, apply_hints, apply_strategy_file, propagate, default_strategies, place_parameters)
    assert check_strategy_file(planned, ctx) is planned
    assert ("Parameter 'w' is stored as [['m1', 'm2'], []] but the strategy file recorded.ckpt recorded [[], []]"
            in notices.text)
    assert "'w2'" not in notices.text  # not recorded: nothing to compare


def test_verify_accepts_a_planned_graph_and_names_each_broken_invariant():
    graph, ctx = quickstart(out=12)
    planned = run(graph, ctx, apply_hints, propagate, default_strategies, place_parameters)
    assert verify(planned, ctx) is planned
    relu = node(planned, "relu")
    where = f"node %{relu.id} ReLU 'relu' ({SCOPE})"
    specs = planned.plan.value_specs
    w2 = next(v for v in planned.inputs if planned.values[v].name == "w2")
    label = planned.inputs[3]
    twice = dataclasses.replace(relu.strategy, label_axes=(("d0", ("m0",)), ("d1", ("m0", "m1"))))
    broken = {
        f"{where} has no strategy after planning": planned.with_annotations({relu.id: {"provenance": None}}),
        f"{where} input 0: mesh axis 'm0' used twice in (('m0',), ('m0', 'm1'))":
            planned.with_annotations({relu.id: {"strategy": twice}}),
        f"graph input %{w2} (w2) has no storage layout": _with_specs(planned, {k: v for k, v in specs.items()
                                                                              if k != w2}),
        f"graph input %{w2}: split 8 does not divide 12 in ((), ('m0', 'm1', 'm2'))":
            _with_specs(planned, {**specs, w2: ((), ("m0", "m1", "m2"))}),
        f"graph input %{label}: unknown mesh axis 'm9' in (('m9',), ())": _with_specs(planned, {**specs,
                                                                                            label: (("m9",), ())}),
        f"graph input %{label}: layout (('m0',),) has rank 1 for shape (16, 12)":
            _with_specs(planned, {**specs, label: (("m0",),)}),
    }
    for message, graph_ in broken.items():
        with pytest.raises(PlanInvariantError, match=f"^{re.escape(message)}$"):
            verify(graph_, ctx)


def _with_specs(graph, specs):
    return graph.with_plan(value_specs=specs)


def test_report_redistributions_prices_every_edge_whose_layouts_differ(notices):
    graph, ctx = quickstart()
    planned = run(graph, ctx, apply_hints, propagate, default_strategies, place_parameters)
    out = report_redistributions(planned, ctx)
    ids = {n.instance_name: n.id for n in out.node_list()}
    edges = [(r["node"], r["input"], r["from"], r["to"], r["bytes"], r["messages"])
             for r in out.plan.redistributions]
    assert edges == [
        (ids["matmul"], 0, (("m0", "m1", "m2"), ()), (("m0",), ("m1", "m2")), 192.0, 1),  # dataset -> the hint
        (ids["relu"], 0, (("m0",), ()), (("m0",), ("m1", "m2")), 384.0, 1),  # a slice; its cotangent gathered
        (ids["sub"], 0, (("m0",), ()), (("m0", "m1", "m2"), ()), 384.0, 1),  # the same, to the label's rows
    ]
    assert in_strategies(out) == in_strategies(planned)  # changes no strategy
    assert ("redistribution inserted at edge input 'input0' -> 'matmul' input 0 (scope "
            f"{SCOPE}): tensor (16, 32) from (m0.m1.m2, -) to (m0, m1.m2), 192 B per device per step (1 collective)"
            in notices.text)


def test_search_decides_every_other_op_and_keeps_the_hint():
    graph, ctx = quickstart(parallel_mode="auto_parallel", search_mode="dynamic_programming")
    out = run(graph, ctx, apply_hints, search)
    assert in_strategies(out) == {"matmul": ((2, 4), (4, 1)), **DATA_PARALLEL}
    assert provenances(out) == {"matmul": "user", **dict.fromkeys(DATA_PARALLEL, "searched")}
    assert node(out, "relu").provenance.detail == "dynamic_programming, ILP (HiGHS)"
    found = out.plan.search
    assert found.optimal and found.budget is None and set(found.records) == {
        node(out, name).id for name in DATA_PARALLEL}
    matmul2 = found.records[node(out, "matmul2").id]
    assert matmul2.chosen.strategy == ((8, 1), (1, 1))
    assert all(alt.time >= matmul2.chosen.time for alt in matmul2.alternatives)
