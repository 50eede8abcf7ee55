"""The parallel optimizer: sharded optimizer state and parameters, equal numbers, no extra communication."""

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import ConfigError
from graphpar.models.mlp import DeepFFN
from graphpar.planner import strategy_file
from tests.bigmodels.hlo_helpers import loop_collectives, step_collectives, step_wire_bytes
from tests.bigmodels.nets import DenseBatchNorm, data, params, wide_mlp


class _HalfMSE(nn.Cell):
    """MSE * 0.5: a loss that goes on computing after its mean over the batch."""

    def __init__(self):
        super().__init__()
        self.mse, self.mul = nn.MSELoss(), ops.Mul()

    def construct(self, logits, labels):
        return self.mul(self.mse(logits, labels), 0.5)


def _adam(mode, opt_parallel, steps=10, config=None, net=None, dims=(64, 64), hlo=False, loss=None, micro=1,
          **ctx):
    ms.reset_auto_parallel_context()
    config = {"parallel_optimizer_threshold": 0} if config is None else config
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True, enable_parallel_optimizer=opt_parallel,
                                 parallel_optimizer_config=config, **ctx)
    net = net or wide_mlp()
    with_loss = nn.WithLossCell(net, loss or nn.MSELoss())
    with_loss = nn.GradAccumulation(with_loss, micro) if micro > 1 else with_loss
    train = nn.TrainOneStepCell(with_loss, nn.Adam(net.trainable_params(), 0.01))
    x, y = data(32, *dims)
    hlo = train.program.lower_step([x, y]).compile().as_text() if hlo else None
    for _ in range(steps):
        train(x, y)
    return net, train, hlo


def _bytes_on(device, tree):
    return sum(s.data.nbytes for leaf in jax.tree.leaves(tree) for s in leaf.addressable_shards if s.device == device)


def test_adam_on_8_devices_shards_state_keeps_numbers_and_communication():
    net_dp, train_dp, hlo_dp = _adam("data_parallel", False, hlo=True)
    net, train, hlo = _adam("data_parallel", True, hlo=True)
    state = train.optimizer.opt_state
    total = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
    for device in jax.devices():
        assert abs(_bytes_on(device, state) - total / 8) <= 0.01 * total / 8
    # parameters too: each device stores 1/8 of every weight, on its first dimension
    w = net.fc1.weight.get_raw_value()
    assert {s.data.shape for s in w.addressable_shards} == {(32, 64)}
    expected = params(net_dp)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-6, atol=1e-7)
    # one reduce-scatter + one all-gather per parameter replaces the all-reduce: the same wire bytes
    kinds = {c.kind for c in step_collectives(hlo)}
    assert {"ReduceScatter", "AllGather"} <= kinds
    assert step_wire_bytes(hlo) <= 1.0 * step_wire_bytes(hlo_dp)


@pytest.mark.parametrize("loss", [nn.MSELoss, _HalfMSE])
def test_semi_auto_reduce_scatters_gradients_like_data_parallel(loss):
    # SEMI_AUTO runs per data-parallel replica (compile.replica_split) and reduces each gradient with an explicit
    # reduce-scatter into its shard: XLA:CPU's own choice would be an all-reduce and a slice (1.5x the bytes).
    # A loss computed on after its mean (_HalfMSE) adds one scalar all-reduce (the mean made global)
    _, _, hlo_dp = _adam("data_parallel", False, steps=0, hlo=True)
    base, _, _ = _adam("semi_auto_parallel", False, steps=3, loss=loss())
    net, _, hlo = _adam("semi_auto_parallel", True, steps=3, hlo=True, loss=loss())
    assert {"ReduceScatter", "AllGather"} <= {c.kind for c in step_collectives(hlo)}
    assert step_wire_bytes(hlo) <= 1.0001 * step_wire_bytes(hlo_dp)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(base)[name], rtol=1e-6, atol=1e-7)


def test_semi_auto_batchnorm_reduce_scatters_gradients():
    # SEMI_AUTO's BatchNorm normalizes over the whole batch: the replicas share its statistics (32 floats a
    # micro-batch) and still reduce-scatter each gradient once, no more bytes than without the parallel optimizer
    base, _, hlo_plain = _adam("semi_auto_parallel", False, steps=3, hlo=True, net=DenseBatchNorm(), dims=(16, 8))
    net, _, hlo = _adam("semi_auto_parallel", True, steps=3, hlo=True, net=DenseBatchNorm(), dims=(16, 8))
    assert "ReduceScatter" in {c.kind for c in step_collectives(hlo)}
    assert step_wire_bytes(hlo) <= step_wire_bytes(hlo_plain)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(base)[name], rtol=1e-5, atol=1e-6)


def test_default_threshold_keeps_a_16kb_parameter_replicated():
    # fc1.weight 64x64 fp32 = 16 KB < 64 KB stays whole; fc2.weight 256x64 = 64 KB is sharded
    net, train, _ = _adam("data_parallel", True, steps=1, config={}, net=wide_mlp(64, 64, 256),
                          dims=(64, 256))
    assert {s.data.shape for s in net.fc1.weight.get_raw_value().addressable_shards} == {(64, 64)}
    assert {s.data.shape for s in net.fc2.weight.get_raw_value().addressable_shards} == {(32, 64)}
    layout = train.program.planned(list(data(32, 64, 256))).layout
    shards = train.program.optimizer_sharding(train.program.state, layout).by_name()
    assert not shards["fc1.weight"].sharded and "threshold" in shards["fc1.weight"].reason
    assert shards["fc2.weight"].group_size == 8


@pytest.mark.slow
def test_model_parallel_parameter_is_sharded_further_over_its_replica_axes():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            rng = np.random.default_rng(0)
            self.w = ms.Parameter(ms.Tensor(rng.normal(0, 0.1, (64, 256)).astype(np.float32)), "w")
            self.w2 = ms.Parameter(ms.Tensor(rng.normal(0, 0.1, (256, 64)).astype(np.float32)), "w2")
            self.mm = ops.MatMul().shard(((2, 1), (1, 4)))
            self.relu = ops.ReLU()
            self.mm2 = ops.MatMul()

        def construct(self, x):
            return self.mm2(self.relu(self.mm(x, self.w)), self.w2)

    base, _, _ = _adam("semi_auto_parallel", False, steps=3, net=Net())
    net, train, hlo = _adam("semi_auto_parallel", True, steps=3, net=Net(), hlo=True)
    layout = train.program.planned(list(data(32, 64, 64))).layout
    shard = train.program.optimizer_sharding(train.program.state, layout).by_name()["w"]
    # w is split 4 ways on dim 1 by the strategy; the parallel optimizer splits dim 0 over the other 2 devices
    assert shard.group_size == 2 and shard.storage_spec[1] == shard.compute_spec[1]
    assert {s.data.shape for s in net.w.get_raw_value().addressable_shards} == {(32, 64)}
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(base)[name], rtol=1e-6, atol=1e-7)
    assert any(c.kind == "AllGather" for c in step_collectives(hlo))


@pytest.mark.slow
def test_shard_size_and_levels():
    net, train, _ = _adam("data_parallel", True, steps=2,
                          config={"parallel_optimizer_threshold": 0, "optimizer_weight_shard_size": 2})
    assert {s.data.shape for s in net.fc1.weight.get_raw_value().addressable_shards} == {(128, 64)}
    base = params(_adam("data_parallel", False, steps=2)[0])
    for level in ("level2", "level3"):
        net, _, _ = _adam("data_parallel", True, steps=2,
                          config={"parallel_optimizer_threshold": 0, "optimizer_level": level})
        for name, value in params(net).items():
            np.testing.assert_allclose(value, base[name], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["data_parallel", "semi_auto_parallel"])
def test_level3_gathers_again_the_weights_backward_needs(mode):
    def gathers(level):
        _, _, hlo = _adam(mode, True, steps=0, hlo=True,
                          config={"parallel_optimizer_threshold": 0, "optimizer_level": level})
        return sorted(s for c in step_collectives(hlo) if c.kind == "AllGather" for _, s in c.shapes)

    level1, level3 = gathers("level1"), gathers("level3")
    assert level1 == sorted([(256, 64), (256,), (64, 256), (64,)])  # each parameter gathered once
    # level3 keeps only activations from the forward pass: fc2.weight, which the gradient of fc1's output needs,
    # is gathered again; fc1.weight is not (the input's gradient is not needed), nor are the biases
    assert level3 == sorted(level1 + [(64, 256)])


def _kinds(collectives):
    return sorted({c.kind for c in collectives})


def _accumulating(mode, opt_parallel, config=None, steps=0):
    """Adam over 4 micro-batches: the net and the HLO of the step it trained with (compiled once)."""
    net, train, _ = _adam(mode, opt_parallel, steps=steps, config=config, micro=4)
    return net, train.program.stages(list(data(32, 64, 64))).compiled.as_text()


@pytest.mark.parametrize("mode", ["data_parallel", "semi_auto_parallel"])
def test_level1_over_micro_batches_accumulates_locally_and_reduce_scatters_once(mode):
    # level1 keeps each replica's whole gradient through the 4 micro-batches and reduce-scatters it into the
    # shards once, after the loop: the bytes of DATA_PARALLEL's one all-reduce
    base, hlo_dp = _accumulating("data_parallel", False, steps=2)
    net, hlo = _accumulating(mode, True, steps=2)
    assert "while" in hlo and loop_collectives(hlo) == []  # nothing crosses devices per micro-batch
    assert _kinds(step_collectives(hlo)) == ["AllGather", "AllReduce", "ReduceScatter"]  # AllReduce: the loss
    assert step_wire_bytes(hlo, trips=4) <= 1.0001 * step_wire_bytes(hlo_dp, trips=4)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(base)[name], rtol=1e-6, atol=1e-7)


def test_level2_over_micro_batches_keeps_the_accumulator_sharded():
    # MindSpore's level2 sets gradient_accumulation_shard: the accumulator is 1/8 of the gradients, so each
    # micro-batch's gradient is reduce-scattered into it, the "additional communication (ReduceScatter) at each
    # step" MindSpore's docs name: 4 reduce-scatters and one gather, 2.5 times DATA_PARALLEL's one all-reduce
    dp = step_wire_bytes(_accumulating("data_parallel", False)[1], trips=4)
    _, hlo = _accumulating("data_parallel", True, {"parallel_optimizer_threshold": 0, "optimizer_level": "level2"})
    assert _kinds(loop_collectives(hlo)) == ["ReduceScatter"]
    assert step_wire_bytes(hlo, trips=4) == pytest.approx(2.5 * dp, rel=1e-3)


def test_level3_over_micro_batches_gathers_again_for_each_backward_pass():
    # level3 (MindSpore's zero3) shards the accumulator as level2 does, and gathers again, in each micro-batch's
    # backward pass, the weight that pass needs (fc2.weight); XLA hoists the forward gathers out of the loop
    dp = step_wire_bytes(_accumulating("data_parallel", False)[1], trips=4)
    _, hlo = _accumulating("data_parallel", True, {"parallel_optimizer_threshold": 0, "optimizer_level": "level3"})
    assert _kinds(loop_collectives(hlo)) == ["AllGather", "ReduceScatter"]
    assert [s for c in loop_collectives(hlo) if c.kind == "AllGather" for _, s in c.shapes] == [(64, 256)]
    # forward gathers once (0.5) + 4 x (fc2.weight's gather 0.25 + reduce-scatter 0.5)
    assert step_wire_bytes(hlo, trips=4) == pytest.approx(3.5 * dp, rel=1e-2)


@pytest.mark.slow  # two compiles of an 8-layer Adam step: ~17 s on the shared 2-core machine
def test_level3_cuts_temp_memory_of_8_layers_with_xla_default_flags(monkeypatch):
    """graphpar compiles level3's step (it recomputes) with XLA:CPU's memory-optimized scheduler per compilation,
    so no XLA flag is needed (compile.lowering.recompute.compiler_options)."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # no scheduler flag
    temp = {}
    for level in ("level1", "level3"):
        ms.reset_auto_parallel_context()
        config = {"parallel_optimizer_threshold": 0, "optimizer_level": level}
        ms.set_auto_parallel_context(parallel_mode="data_parallel", enable_parallel_optimizer=True,
                                     parallel_optimizer_config=config)
        net = DeepFFN(256, 8)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params(), 0.01))
        temp[level] = train.program.lowered(list(data(64, 256, 256))).compile().memory_analysis().temp_size_in_bytes
    # level1 keeps every gathered weight (8 blocks x 2 x 1 MB) alive until backward; level3 only activations
    assert temp["level3"] <= 0.5 * temp["level1"], temp


class _TwoWeights(nn.Cell):
    """64 -> 256 -> 64 without biases; ``w2`` opts out of the parallel optimizer as MindSpore lets a Parameter do."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w1 = ms.Parameter(ms.Tensor(rng.normal(0, 0.1, (64, 256)).astype(np.float32)), "w1")
        self.w2 = ms.Parameter(ms.Tensor(rng.normal(0, 0.1, (256, 64)).astype(np.float32)), "w2")
        self.w2.parallel_optimizer = False  # as Pangu-alpha sets it; or Parameter(..., parallel_optimizer=False)
        self.mm1, self.mm2, self.relu = ops.MatMul(), ops.MatMul(), ops.ReLU()

    def construct(self, x):
        return self.mm2(self.relu(self.mm1(x, self.w1)), self.w2)


@pytest.mark.parametrize("mode", ["data_parallel", "semi_auto_parallel"])
def test_parameter_with_parallel_optimizer_false_stays_whole(mode, tmp_path, notices):
    strategy = str(tmp_path / "strategy.json")
    base, _, _ = _adam(mode, False, steps=2, net=_TwoWeights())
    net, train, _ = _adam(mode, True, steps=2, net=_TwoWeights(), strategy_ckpt_config={"save_file": strategy})
    # w1 and its two Adam moments are stored 1/8 per device; w2 and its moments whole on every device
    assert {s.data.shape for s in net.w1.get_raw_value().addressable_shards} == {(8, 256)}
    assert {s.data.shape for s in net.w2.get_raw_value().addressable_shards} == {(256, 64)}
    moments = {leaf.shape: {s.data.shape for s in leaf.addressable_shards}
               for leaf in jax.tree.leaves(train.optimizer.opt_state) if np.ndim(leaf) == 2}
    assert moments == {(64, 256): {(8, 256)}, (256, 64): {(256, 64)}}
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(base)[name], rtol=1e-6, atol=1e-7)
    layouts = strategy_file.read(strategy).layouts  # the strategy file says so too
    assert (layouts["w1"].opt_weight_shard_size, layouts["w2"].opt_weight_shard_size) == (8, 0)
    assert "w2" not in notices.text  # the user asked for it: no notice
    assert net.w2.clone().parallel_optimizer is False
    assert ms.Parameter(ms.Tensor(np.ones(2, np.float32)), "p", parallel_optimizer=False).parallel_optimizer is False


def test_bad_parallel_optimizer_config_is_named():
    with pytest.raises(ConfigError, match="optimizer_level"):
        ms.set_auto_parallel_context(parallel_optimizer_config={"optimizer_level": "level4"})
    with pytest.raises(ConfigError, match="parallel_optimizer_threshold"):
        ms.set_auto_parallel_context(parallel_optimizer_config={"parallel_optimizer_threshold": -1})
    with pytest.raises(ConfigError, match="valid choices"):
        ms.set_auto_parallel_context(parallel_optimizer_config={"threshold": 1})
    ms.set_auto_parallel_context(optimizer_weight_shard_size=4)
    assert ms.get_auto_parallel_context("parallel_optimizer_config")["optimizer_weight_shard_size"] == 4
