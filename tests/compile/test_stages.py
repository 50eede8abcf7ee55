"""Each compile stage called on its own for seed 004's quickstart network (AUTO_PARALLEL, sharding propagation, 8
devices): trace -> Traced (the jaxpr), plan -> Planned (the strategies), lower -> Lowered (StableHLO with the
shardings), compile -> Compiled (runs, gives STAND_ALONE's loss, and its HLO has the plan's collectives)."""

import jax
import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.staging.orchestrate import run_passes
from graphpar.compile.plans.planned import Planned, Traced
from graphpar.compile.staging.stages import Compiled, Lowered

from tests.planner.helpers import collectives, rand
from tests.planner.passes_helpers import PROPAGATION, QuickstartNet, in_strategies

X, Y = rand(16, 32), rand(16, 16, seed=3)
SCOPE = "Default/network-WithLossCell/_backbone-QuickstartNet"
PLAN = {"matmul": ((2, 4), (4, 1)), "relu": ((2, 4),), "matmul2": ((2, 4), (4, 1)), "sub": ((8, 1), (8, 1)),
        "square": ((8, 1),), "reduce_mean": ((8, 1),)}


def _train(**parallel):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(**(parallel or PROPAGATION))
    net = QuickstartNet()
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.2, 0.1))


def _avals():
    return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (X, Y)]


def test_trace_gives_the_jaxpr_of_the_loss_and_an_unplanned_graph():
    program = _train().program
    traced = program.plan.trace(program.state, _avals(), "train")
    assert isinstance(traced, Traced) and traced.purpose == "train"
    text = traced.as_text()
    assert text.startswith("{ lambda ; a:f32[32,16] b:f32[16,16] c:f32[16,32] d:f32[16,16]. let")
    for op in ("dot_general", "select_n", "sub", "square", "reduce_sum", "div"):
        assert f"= {op}" in text, op
    assert text.count("= dot_general") == 2 and text.rstrip().endswith("in (m,) }")
    graph = traced.graph
    assert [n.instance_name for n in graph.node_list()] == list(PLAN)
    assert [graph.values[v].name for v in graph.inputs] == ["w", "w2", "input0", "input1"]
    assert all(n.strategy is None for n in graph.node_list())


def test_plan_runs_the_pipeline_on_the_traced_graph():
    program = _train().program
    traced = program.plan.trace(program.state, _avals(), "train")
    graph = run_passes(program.plan, traced.graph, program.state, "train")
    assert in_strategies(graph) == PLAN
    assert list(graph.plan.pass_seconds) == ["read_hints", "choose_mesh", "dataset_layouts", "apply_hints",
                                                "apply_strategy_file", "set_data_parallel_strategies", "propagate",
                                                "default_strategies",
                                                "place_parameters", "check_strategy_file", "verify",
                                                "report_redistributions"]
    planned = program.planned([X, Y])
    assert isinstance(planned, Planned) and isinstance(planned.traced, Traced)
    assert in_strategies(planned.graph) == PLAN
    lines = planned.as_text().splitlines()
    assert lines[0] == "# WithLossCell_train (train)"
    assert lines[1] == f"{SCOPE}/matmul#0  MatMul  ((2, 4), (4, 1))  user"
    assert lines[2].startswith(f"{SCOPE}/relu#1  ReLU  ((2, 4))  propagated from matmul (node 0)")


def test_lower_gives_stablehlo_with_the_plans_shardings():
    lowered = _train().program.lowered([X, Y])
    assert isinstance(lowered, Lowered) and lowered.signature.donate_argnums == (0, 1, 2)
    text = lowered.as_text()
    main = next(line for line in text.splitlines() if "func.func public @main" in line)
    # w and w2 stored split 4 ways on their rows (matmul's (4, 1)); the batch split 8 ways (dataset_strategy)
    assert main.count('sdy.sharding = #sdy.sharding<@mesh, [{"m1", "m2"}, {}]>') >= 4
    assert main.count('sdy.sharding = #sdy.sharding<@mesh, [{"m0", "m1", "m2"}, {}]>') >= 2
    # the input re-laid out as matmul's (2, 4) wants it, and the loss's rows as the label's
    assert 'sdy.sharding_constraint %arg4 <@mesh, [{"m0"}, {"m1", "m2"}]> : tensor<16x32xf32>' in text
    assert '<@mesh, [{"m0", "m1", "m2"}, {}]> : tensor<16x16xf32>' in text


def test_compile_runs_with_the_loss_of_stand_alone_and_the_plans_collectives():
    train = _train()
    stages = train.program.stages([X, Y])
    compiled = stages.compiled
    assert isinstance(compiled, Compiled) and stages.lowered.planned is stages.planned is compiled.planned
    ns = train.program.state
    p_sh, r_sh, o_sh, i_sh = compiled.in_shardings
    params = [jax.device_put(np.asarray(v), s) for v, s in zip(ns.params.values(), p_sh)]
    rest = [jax.device_put(np.asarray(v), s) for v, s in zip(ns.rest.values(), r_sh)]
    opt_state = jax.tree.map(lambda v, s: jax.device_put(np.asarray(v), s), train.optimizer.opt_state, o_sh)
    inputs = [jax.device_put(a, s) for a, s in zip((X, Y), i_sh)]
    new_params, _, _, loss = compiled(params, rest, opt_state, inputs)
    assert [p.sharding.shard_shape(p.shape) for p in new_params] == [(8, 16), (4, 16)]

    alone = _train(parallel_mode="stand_alone")
    np.testing.assert_allclose(float(loss), float(alone(X, Y)), rtol=1e-5)
    assert train.program.counts.compiles == 1
    # the Compiled keeps the Lowered it was made from: asking for every stage lowers nothing again
    assert stages.lowered is compiled.lowered and train.program.counts.lowerings == 1
    # the input's all-to-all into matmul's (2, 4); the cotangents of matmul and matmul2 gathered back to their
    # (2, 1) outputs; the partial sums, weight gradients and the loss reduced
    assert collectives(compiled.as_text()) == {"all-to-all": 1, "all-gather": 2, "all-reduce": 4}


def test_each_stage_keeps_its_wall_and_cpu_seconds():
    """A built program says how long its lowering and XLA's compile took, in wall clock and in the process's CPU
    time (what benchmarks compare stages by on a loaded machine): both positive for each stage."""
    stages = _train().program.stages([X, Y])
    compiled = stages.compiled
    for times in (compiled.seconds, compiled.cpu_seconds):
        assert set(times) == {"lowering", "XLA compile"} and all(t > 0 for t in times.values()), times
    # and its planned stage, tracing's and planning's CPU time apart (the cached run's split, bench first_step)
    assert set(stages.planned.cpu_seconds) == {"tracing", "planning"}, stages.planned.cpu_seconds
    assert all(t > 0 for t in stages.planned.cpu_seconds.values()) and stages.planned.seconds > 0
