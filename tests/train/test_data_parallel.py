"""DATA_PARALLEL has MindSpore's semantics: per-device losses on slices of the global batch, gradients summed
(gradients_mean=False) or averaged (True) across devices."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.errors import DatasetError

from .helpers import MLP, regression_data, train_steps


def _close(a, b, rtol=1e-5, atol=1e-6):
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def test_gradients_mean_true_equals_stand_alone():
    x, y = regression_data(64)
    dp, dp_losses = train_steps("data_parallel", x, y, 10, gradients_mean=True)
    sa, sa_losses = train_steps("stand_alone", x, y, 10)
    _close(dp, sa)
    np.testing.assert_allclose(dp_losses, sa_losses, rtol=1e-5)


def test_gradients_mean_false_sums_per_device_gradients():
    # MindSpore: each of the 8 devices computes the mean loss of its slice; the gradients are summed. For a mean
    # loss over equal slices that is 8x the gradient of the global mean: stand-alone with sensitivity 8.
    x, y = regression_data(64)
    dp, _ = train_steps("data_parallel", x, y, 10, gradients_mean=False, lr=0.005)
    ms.reset_auto_parallel_context()
    net = MLP()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.005, 0.9),
                                sens=8.0)
    for _ in range(10):
        train(x, y)
    _close(dp, {p.name: p.asnumpy() for p in net.get_parameters()})


def test_gradients_mean_false_with_a_sum_loss_equals_the_global_sum():
    # With reduction="sum", summing per-device sums is the global sum: no factor appears.
    x, y = regression_data(64)
    dp, _ = train_steps("data_parallel", x, y, 5, gradients_mean=False, lr=0.0005, loss=nn.MSELoss("sum"))
    sa, _ = train_steps("stand_alone", x, y, 5, lr=0.0005, loss=nn.MSELoss("sum"))
    _close(dp, sa)
    dp_mean, _ = train_steps("data_parallel", x, y, 5, gradients_mean=True, lr=0.0005, loss=nn.MSELoss("sum"))
    assert not np.allclose(dp_mean["fc1.weight"], sa["fc1.weight"], rtol=1e-4)


def test_batch_is_split_and_parameters_replicated():
    x, y = regression_data(64)
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    net = MLP()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    train(x, y)
    assert len(net.fc1.weight.get_value().sharding.device_set) == 8
    assert net.fc1.weight.get_value().sharding.is_fully_replicated
    placed = train.program.place_inputs([x, y])
    assert placed[0].sharding.shard_shape(placed[0].shape) == (8, 16)
    hlo = train.program.lower_step([x, y]).compile().as_text()
    assert hlo.count(" all-reduce(") + hlo.count(" all-reduce-start(") >= 1


def test_full_batch_not_divisible_is_a_clear_error():
    x, y = regression_data(10)
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    net = MLP()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    with pytest.raises(DatasetError) as err:
        train(x, y)
    assert "(10, 16)" in str(err.value) and "divisible" in str(err.value) and "8" in str(err.value)


def test_device_num_uses_the_first_devices():
    x, y = regression_data(16)
    dp4, _ = train_steps("data_parallel", x, y, 3, device_num=4)
    sa, _ = train_steps("stand_alone", x, y, 3)
    _close(dp4, sa)


def _entry_ops(hlo: str) -> dict[str, int]:
    """Instruction kinds of an optimized HLO module's entry computation, counted (fusions by their kind: loop or
    library call)."""
    import collections
    import re

    entry = hlo[hlo.index("\nENTRY"):]
    ops = collections.Counter(m.group(1) for m in re.finditer(r"= \S+(?: \S+)*? ([a-z][a-z-]*)\(", entry))
    ops.update(f"fusion:{kind}" for kind in re.findall(r" fusion\(.*?kind=(\w+)", entry))
    return dict(ops)


def test_the_program_is_the_one_a_jax_user_writes():
    """DATA_PARALLEL's per-device losses run as each device's own program (``shard_map`` over the replicas): XLA
    compiles the same instructions as for a hand-written ``jax.jit`` data-parallel step with the batch sharded
    and the parameters replicated — no transposes of the per-device batch for the weight gradients (the ``vmap``
    formulation contracted the replica and local batch dimensions together: 21 fusions against 18) and one
    all-reduce of the gradients."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding, PartitionSpec

    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    x, y = regression_data(16, 32, 16)
    net = MLP(32, 16, 16)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    ours = _entry_ops(train.program.lower_step([x, y]).compile().as_text())

    mesh = train.program.plan.mesh
    rep, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec(mesh.axis_names))
    tx = optax.sgd(0.01, momentum=0.9)

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p[0].T + p[1])
        return jnp.mean(jnp.square(h @ p[2].T + p[3] - y))

    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    p = [jnp.asarray(v.asnumpy()) for v in (net.fc1.weight, net.fc1.bias, net.fc2.weight, net.fc2.bias)]
    jitted = jax.jit(step, in_shardings=(rep, rep, split, split), out_shardings=rep, donate_argnums=(0, 1))
    theirs = _entry_ops(jitted.lower(p, tx.init(p), x, y).compile().as_text())
    assert ours == theirs
    assert ours["all-reduce"] == 1 and "copy" not in ours and "transpose" not in ours


def test_mixed_precision_reduces_float16_gradients_where_they_meet_the_batch():
    """A float32 weight cast to float16 before its matmul (amp O2) has its gradient summed over the devices where
    it meets the batch, in float16, as the SEMI_AUTO plan's partitioned matmul sums it (a float16 overflow there is
    what a dynamic loss scale reacts to): DATA_PARALLEL keeps its ``vmap`` over the replicas for such a graph,
    while a float32 network's weight gradients are reduced in float32."""
    from graphpar import amp

    x, y = regression_data(16, 32, 16)
    for level, dtype in (("O0", "f32"), ("O2", "f16")):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
        net = amp.auto_mixed_precision(MLP(32, 16, 16), level, dtype=ms.float16)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
        hlo = train.program.lower_step([x, y]).compile().as_text()
        reductions = [line.split(" all-reduce")[0] for line in hlo.splitlines()
                      if " all-reduce(" in line or " all-reduce-start(" in line]
        assert reductions and any(f"{dtype}[16,32]" in r or f"{dtype}[32,16]" in r for r in reductions), level


class _ConvBN(nn.Cell):
    """Conv2d → BatchNorm2d → ReLU → Dense: the smallest network with state besides its trainable parameters
    (the moving statistics the train step writes)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="same", weight_init="normal")
        self.bn = nn.BatchNorm2d(4)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(64, 3, weight_init="normal")

    def construct(self, x):
        return self.fc(self.flatten(ms.ops.relu(self.bn(self.conv(x)))))


def _train_conv_bn(mode, x, y, steps):
    ms.reset_auto_parallel_context()
    ms.set_context(mode=mode)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    ms.set_seed(0)
    net = _ConvBN()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    for _ in range(steps):
        train(x, y)
    return {p.name: p.asnumpy() for p in net.get_parameters()}, train


def test_a_batchnorm_network_runs_per_device_with_the_vmap_semantics():
    """A network with BatchNorm also runs as each device's own program: each device normalizes its slice with the
    slice's statistics and updates its moving statistics, which are averaged over the replicas. After 3 steps the
    parameters and moving statistics equal PYNATIVE_MODE's, which runs the replicas as a ``vmap`` on one device
    with the same semantics. The slices' statistics differ (the rows are scaled 1..16), so taking one replica's
    statistics instead of the average, or the global batch's, would show."""
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(16, 3, 4, 4)) * np.arange(1, 17)[:, None, None, None]).astype(np.float32)
    y = rng.integers(0, 3, size=16).astype(np.int32)
    graph, train = _train_conv_bn(ms.GRAPH_MODE, x, y, 3)
    # the per-device program: each gradient reduced by the named psum of compile.plans.per_device, no vmap
    hlo = train.program.lower_step([x, y]).compile().as_text()
    assert "bn-BatchNorm2d/bn_train#1/gradient_reduction/psum" in hlo and "vmap(" not in hlo
    eager, _ = _train_conv_bn(ms.PYNATIVE_MODE, x, y, 3)
    _close(graph, eager)
