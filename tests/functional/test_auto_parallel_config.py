"""``AutoParallel``'s configuration methods (MindSpore 2.6): each changes what the wrapped step compiles, for the
wrapper's calls only, or is refused by name.

    parallel_net = AutoParallel(train_step, parallel_mode="semi_auto")
    parallel_net.hsdp()                                  # optimizer state sharded over the data-parallel devices
    parallel_net.dataset_strategy(((2, 1), (2, 1)))      # the step's inputs laid out so
    parallel_net.save_param_strategy_file("/tmp/s.ckpt") # the plan's strategy file written there
    loss = parallel_net(data, label)
"""

import json

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.errors import ConfigError, JitError
from graphpar.parallel import AutoParallel

from tests.functional.steps import X, Y, Net, dump_file, functional_loop


def _configured(configure, parallel_mode="semi_auto"):
    def wrap(step):
        parallel_net = AutoParallel(step, parallel_mode=parallel_mode)
        configure(parallel_net)
        return parallel_net
    return wrap


def _specs(arrays):
    return [a.sharding.spec for a in jax.tree.leaves(arrays)]


def test_hsdp_shards_weights_and_optimizer_state_over_the_data_parallel_devices_for_its_call_only():
    losses, _, opt, _ = functional_loop(wrap=_configured(lambda net: None))
    sharded, net, opt_hsdp, _ = functional_loop(wrap=_configured(lambda net: net.hsdp(threshold=0)))
    np.testing.assert_allclose(sharded, losses, rtol=1e-6)
    # w1 is (4, 1)-split over m1.m2 by the MatMul's hint: hsdp adds the data-parallel axis m0; w2 (replicated by
    # the plan) is split over all eight devices
    assert _specs(opt.opt_state) == [jax.P(("m1", "m2"), None), jax.P(None, None)]
    assert _specs(opt_hsdp.opt_state) == [jax.P(("m1", "m2", "m0"), None), jax.P(("m0", "m1", "m2"), None)]
    assert _specs([p.get_value() for p in net.get_parameters()]) == _specs(opt_hsdp.opt_state)
    assert ms.get_auto_parallel_context("enable_parallel_optimizer") is False  # nothing leaks after the call
    assert ms.get_auto_parallel_context("parallel_mode") == "stand_alone"
    # parameters under the threshold (64 KB by default; these are 2 KB and 1 KB) keep the plan's layout
    _, _, opt_small, _ = functional_loop(wrap=_configured(lambda net: net.hsdp()))
    assert _specs(opt_small.opt_state) == _specs(opt.opt_state)


def test_two_wrappers_of_one_step_with_different_settings_compile_two_programs():
    _, _, opt, train_step = functional_loop(steps=1, wrap=_configured(lambda net: None))
    hsdp = AutoParallel(train_step)
    hsdp.hsdp(threshold=0)
    hsdp(X, Y)
    assert _specs(opt.opt_state)[1] == jax.P(("m0", "m1", "m2"), None)
    AutoParallel(train_step)(X, Y)
    assert _specs(opt.opt_state)[1] == jax.P(None, None)  # gathered back by the other wrapper's program
    (entry,) = train_step.programs.values()
    assert entry.program.counts.compiles == 2


def test_dataset_strategy_sets_the_step_inputs_layout(tmp_path):
    for name, config in (("default", None), ("split", ((2, 1), (2, 1))), ("full", "full_batch")):
        functional_loop(steps=1, dumps=tmp_path / name,
                        wrap=_configured(lambda net: config is None or net.dataset_strategy(config)))
    layouts = {name: [line.split("# layout: ")[1] for line in dump_file(tmp_path / name, 0, "step_parallel_begin")
                      .splitlines() if line.startswith("%data")] for name in ("default", "split", "full")}
    assert layouts["default"] == ["(m0.m1.m2, -)  # split: (8, 1)"] * 2
    assert layouts["split"] == ["(m0, -)  # split: (2, 1)"] * 2
    assert layouts["full"] == ["(-, -)  # split: (1, 1)"] * 2
    assert ms.get_auto_parallel_context("dataset_strategy") == "data_parallel"


def test_save_param_strategy_file_writes_the_plan_there_and_the_job_setting_is_untouched(tmp_path):
    path = tmp_path / "strategy.ckpt"
    functional_loop(steps=1, wrap=_configured(lambda net: net.save_param_strategy_file(str(path))))
    assert path.exists() and "w1" in path.read_text()
    assert ms.get_auto_parallel_context("strategy_ckpt_config")["save_file"] == ""


def test_operator_strategy_file_of_sharding_propagation(tmp_path):
    path = tmp_path / "ops.json"
    functional_loop(steps=1, wrap=_configured(lambda net: net.save_operator_strategy_file(str(path)),
                                              parallel_mode="sharding_propagation"))
    assert "matmul" in json.dumps(json.loads(path.read_text())).lower()
    assert ms.get_auto_parallel_context("search_mode") == "recursive_programming"  # the job's default, back
    with pytest.raises(ConfigError, match=r"AutoParallel.load_operator_strategy_file\(\): file_path must be an "
                                          r"absolute path ending in '.json'"):
        AutoParallel(lambda x: x).load_operator_strategy_file("ops.json")


def _reduced_loop(configure):
    """The functional loop with MindSpore's ``DistributedGradReducer`` after ``value_and_grad``."""
    net = Net()
    loss_fn = nn.MSELoss()
    optimizer = nn.SGD(net.trainable_params(), 0.01)
    grad_reducer = nn.DistributedGradReducer(optimizer.parameters)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)

    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        optimizer(grad_reducer(grads))
        return loss

    step = _configured(configure)(train_step)
    return [float(step(X, Y)) for _ in range(3)]


def test_enable_gradients_mean_divides_the_reduced_gradient_by_the_devices():
    """MindSpore's reducer sums the eight devices' gradients (``gradients_mean=False``) or takes their mean."""
    summed = _reduced_loop(lambda net: None)
    mean = _reduced_loop(lambda net: net.enable_gradients_mean())
    assert ms.get_auto_parallel_context("gradients_mean") is False
    # an SGD step of 8x the mean gradient moves further than one of the mean gradient
    assert summed[0] == pytest.approx(mean[0]) and summed[1] != pytest.approx(mean[1], rel=1e-3)
    assert abs(summed[1] - summed[0]) > abs(mean[1] - mean[0])


def test_settings_are_restored_when_the_step_raises():
    def train_step(data, label):
        raise RuntimeError("boom")

    parallel_net = AutoParallel(train_step)
    parallel_net.hsdp()
    parallel_net.dataset_strategy("full_batch")
    with pytest.raises(Exception, match="boom"):
        parallel_net(X, Y)
    assert ms.get_auto_parallel_context("enable_parallel_optimizer") is False
    assert ms.get_auto_parallel_context("dataset_strategy") == "data_parallel"
    assert ms.get_auto_parallel_context("parallel_mode") == "stand_alone"


def test_a_wrapped_cell_makes_its_settings_the_jobs():
    parallel_net = AutoParallel(nn.WithLossCell(Net(), nn.MSELoss()), parallel_mode="semi_auto")
    parallel_net.hsdp(shard_size=2, optimizer_level="level2")
    parallel_net.pipeline(stages=2, scheduler="gpipe")
    assert ms.get_auto_parallel_context("enable_parallel_optimizer") is True
    config = ms.get_auto_parallel_context("parallel_optimizer_config")
    assert config["optimizer_weight_shard_size"] == 2 and config["optimizer_level"] == "level2"
    assert ms.get_auto_parallel_context("pipeline_stages") == 2
    assert ms.get_auto_parallel_context("pipeline_config")["pipeline_scheduler"] == "gpipe"
    parallel_net.pipeline(stages=4, interleave=True, scheduler="zero_bubble_v")  # virtual stages: ZB-V
    assert ms.get_auto_parallel_context("pipeline_config") == {"pipeline_interleave": True,
                                                              "pipeline_scheduler": "zero_bubble_v"}
    with pytest.raises(ConfigError, match=r"AutoParallel.pipeline\(\): the interleaved .* 1f1b or zero_bubble_v"):
        parallel_net.pipeline(stages=4, interleave=True, scheduler="gpipe")


def test_hsdp_of_a_wrapped_cell_shards_the_parameters_model_trains():
    net = Net()
    parallel_net = AutoParallel(nn.WithLossCell(net, nn.MSELoss()), parallel_mode="semi_auto")
    parallel_net.hsdp(threshold=0)
    train = nn.TrainOneStepCell(parallel_net, nn.Momentum(net.trainable_params(), 0.05, 0.9))
    train(X, Y)
    assert _specs([p.get_value() for p in net.get_parameters()]) == [jax.P(("m1", "m2", "m0"), None),
                                                                      jax.P(("m0", "m1", "m2"), None)]


@pytest.mark.parametrize("call, message", [
    (lambda n: n.no_init_parameters_in_compile(), r"AutoParallel.no_init_parameters_in_compile\): not built"),
    (lambda n: n.enable_fp32_communication(), r"AutoParallel.enable_fp32_communication\): not built"),
    (lambda n: n.disable_loss_repeated_mean(), r"AutoParallel.disable_loss_repeated_mean\): not built"),
    (lambda n: n.print_local_norm(), r"AutoParallel.print_local_norm\): not built"),
    (lambda n: n.dump_local_norm("/tmp/norms"), r"AutoParallel.dump_local_norm\): not built"),
    (lambda n: n.enable_device_local_norm(), r"AutoParallel.enable_device_local_norm\): not built"),
    (lambda n: n.dataset_strategy((ms.Layout((2, 4), ("dp", "mp"))("dp", "mp"),)),
     r"AutoParallel.dataset_strategy\): .*a tuple of Layout is not"),
])
def test_methods_not_built_are_refused_by_name(call, message):
    with pytest.raises(JitError, match=message):
        call(AutoParallel(lambda x: x))


@pytest.mark.parametrize("call, message", [
    (lambda n: n.hsdp(shard_size=0), r"AutoParallel.hsdp\(\): shard_size must be -1 or an int > 0, got 0"),
    (lambda n: n.hsdp(optimizer_level="level4"), r"AutoParallel.hsdp\(\).*'level1', 'level2', 'level3'"),
    (lambda n: n.pipeline(scheduler="seqpipe"), r"AutoParallel.pipeline\(\).*'seqpipe'.*not built.*'zero_bubble_v'"),
    (lambda n: n.pipeline(scheduler="zero_bubble_v"), r"AutoParallel.pipeline\(\).*needs pipeline_interleave=True"),
    (lambda n: n.dataset_strategy("batch"), r"AutoParallel.dataset_strategy\(\).*'data_parallel', 'full_batch'"),
    (lambda n: n.save_param_strategy_file(3), r"AutoParallel.save_param_strategy_file\(\): file_path must be a str"),
    (lambda n: n.comm_fusion([1]), r"AutoParallel.comm_fusion\(\): config must be a dict"),
])
def test_invalid_arguments_name_the_method(call, message):
    with pytest.raises(ConfigError, match=message):
        call(AutoParallel(lambda x: x))


def test_settings_without_effect_on_xla_are_said_once(notices):
    parallel_net = AutoParallel(lambda x: x)
    for _ in range(2):
        parallel_net.comm_fusion({"openstate": True, "allreduce": {"mode": "auto", "config": None}})
        parallel_net.disable_gradient_fp32_sync()
    said = [r.getMessage() for r in notices.records if r.getMessage().startswith("AutoParallel.")]
    assert len(said) == 2 and "XLA's collective combiners" in said[0] and "casts no gradient" in said[1]


def test_load_param_strategy_file_is_read_by_the_wrapped_steps_plan(tmp_path):
    saved = tmp_path / "strategy.ckpt"
    losses, _, _, _ = functional_loop(steps=2, wrap=_configured(lambda n: n.save_param_strategy_file(str(saved))))
    loaded, _, _, _ = functional_loop(steps=2, wrap=_configured(lambda n: n.load_param_strategy_file(str(saved))))
    np.testing.assert_allclose(loaded, losses, rtol=1e-6)
    with pytest.raises(ConfigError, match="missing.ckpt"):
        functional_loop(steps=1, wrap=_configured(lambda net: net.load_param_strategy_file(str(tmp_path /
                                                                                                "missing.ckpt"))))
    assert ms.get_auto_parallel_context("strategy_ckpt_config")["load_file"] == ""


def test_pipeline_of_a_wrapped_pipeline_cell_trains_as_pipeline_stages_does():
    """MindSpore 2.6's pipeline sample: ``AutoParallel(Pipeline(net_with_loss, micro))`` with ``.pipeline(stages)``
    trained by a ``TrainOneStepCell`` (what ``Model`` builds): the pipelined step finds the PipelineCell inside."""
    from tests.pipeline.helpers import build, mlp_data, train_pipelined

    x, y = mlp_data()
    expected, _, _ = train_pipelined("mlp", 2, 4, "1f1b", x, y, 2)
    ms.reset_auto_parallel_context()
    net, loss, optimizer = build("mlp", 2)
    parallel_net = AutoParallel(nn.PipelineCell(nn.WithLossCell(net, loss), 4), parallel_mode="semi_auto")
    parallel_net.pipeline(stages=2)
    train = nn.TrainOneStepCell(parallel_net, optimizer(net.trainable_params()))
    np.testing.assert_allclose([float(train(x, y)) for _ in range(2)], expected, rtol=1e-6)
