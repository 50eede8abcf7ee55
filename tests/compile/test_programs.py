"""The compile layer: one program per (structure, signature, context), train ↔ eval without recompiling, the
compiled forward of ``net(x)``, the same executable with and without save_graphs, stages as values."""

import contextlib
import logging

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding

import graphpar as ms
from graphpar import nn
from graphpar.compile.runtime.forward import program_for
from graphpar.compile.staging.progress import CompileProgress
from graphpar.planner.strategy import to_partition_spec
from graphpar.train import Model

from tests.train.helpers import array_dataset

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def xla_compiles():
    """Every XLA compilation in the block (jax.monitoring), not only graphpar's."""
    seen: list[str] = []

    def listener(event, duration, **kwargs):
        if event == BACKEND_COMPILE:
            seen.append(kwargs.get("fun_name", ""))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


class BNNet(nn.Cell):
    """Dense → BatchNorm → ReLU → Dense: its train and eval programs differ (batch vs moving statistics)."""

    def __init__(self, d_in=8, hidden=16, classes=4):
        super().__init__()
        rng = np.random.default_rng(0)
        self.fc1 = nn.Dense(d_in, hidden, weight_init=ms.Tensor(rng.normal(0, 0.5, (hidden, d_in)).astype(np.float32)))
        self.bn = nn.BatchNorm1d(hidden, momentum=0.5)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(hidden, classes, weight_init=ms.Tensor(rng.normal(0, 0.5, (classes, hidden)).astype(np.float32)))

    def construct(self, x):
        return self.fc2(self.relu(self.bn(self.fc1(x))))


def _data(n=64, d_in=8, classes=4, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 2.0, size=(n, d_in)).astype(np.float32)
    y = (np.abs(x[:, 0] * 3).astype(np.int64) % classes).astype(np.int32)
    return x, y


def _inference_numpy(net, x):
    """The network in evaluation mode, by hand: BatchNorm with its moving statistics."""
    h = x @ net.fc1.weight.asnumpy().T + net.fc1.bias.asnumpy()
    bn = net.bn
    h = (h - bn.moving_mean.asnumpy()) / np.sqrt(bn.moving_variance.asnumpy() + bn.eps)
    h = np.maximum(h * bn.gamma.asnumpy() + bn.beta.asnumpy(), 0)
    return h @ net.fc2.weight.asnumpy().T + net.fc2.bias.asnumpy()


def test_train_eval_epochs_compile_each_program_once_and_eval_keeps_statistics():
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    x, y = _data()
    net = BNNet()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics={"acc"})
    data = array_dataset(x, y, batch_size=16)
    model.train(1, data)
    model.eval(data)
    with xla_compiles() as compiles:
        for _ in range(4):
            model.train(1, data)
            stats = (net.bn.moving_mean.asnumpy().copy(), net.bn.moving_variance.asnumpy().copy())
            model.eval(data)
            # evaluation runs the inference graph: the moving statistics are read, not updated
            np.testing.assert_array_equal(net.bn.moving_mean.asnumpy(), stats[0])
            np.testing.assert_array_equal(net.bn.moving_variance.asnumpy(), stats[1])
    assert compiles == [], compiles  # epochs 2-5 reuse both programs: no XLA compilation at all
    assert model.train_network.program.counts.compiles == 1
    assert model.train_network.program.counts.traces == 1
    assert program_for(model.eval_network).counts.compiles == 1
    # and what eval computed is the inference network
    net.set_train(False)
    np.testing.assert_allclose(np.asarray(net(x)), _inference_numpy(net, x), rtol=1e-4, atol=1e-5)


def test_set_train_false_on_a_sub_cell_changes_the_train_step_that_runs():
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    x, y = _data()
    net = BNNet()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.05, 0.9))
    train(x, y)
    moved = net.bn.moving_mean.asnumpy().copy()
    assert np.abs(moved).max() > 0  # training mode: the statistics move
    net.bn.set_train(False)
    train(x, y)
    train(x, y)
    # the step that ran used BatchNorm's inference graph: the statistics stayed put
    np.testing.assert_array_equal(net.bn.moving_mean.asnumpy(), moved)
    assert train.program.counts.compiles == 2
    net.bn.set_train(True)
    train(x, y)  # back to the first program: found again, not rebuilt
    assert train.program.counts.compiles == 2
    assert np.abs(net.bn.moving_mean.asnumpy() - moved).max() > 0


class Hinted(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w1 = ms.Parameter(ms.Tensor(rng.normal(size=(16, 32)).astype(np.float32)), "w1")
        self.w2 = ms.Parameter(ms.Tensor(rng.normal(size=(32, 8)).astype(np.float32)), "w2")
        self.matmul1 = ms.ops.MatMul().shard(((2, 1), (1, 4)))
        self.relu = ms.ops.ReLU()
        self.matmul2 = ms.ops.MatMul().shard(((2, 4), (4, 1)))

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul1(x, self.w1)), self.w2)


def test_top_level_call_in_semi_auto_runs_the_planned_program():
    x = np.random.default_rng(1).normal(size=(16, 16)).astype(np.float32)
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Hinted()
    expected = np.asarray(net(x))  # STAND_ALONE, compiled on one device
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    with xla_compiles() as compiles:
        out = net(x)
    # one program, not one compilation per op (placing the parameters on their planned layouts may slice them)
    assert [c for c in compiles if "multi_slice" not in c] == ["jit(forward)"], compiles
    with xla_compiles() as compiles:
        out2 = net(x)
    assert compiles == []
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out2), np.asarray(out))
    planned = program_for(net).planned(x)
    graph = planned.graph
    node = graph.producer(graph.outputs[0])
    want = NamedSharding(planned.layout.mesh, to_partition_spec(node.strategy.output_spec(0)))
    assert len(out.sharding.device_set) == 8
    assert out.sharding.is_equivalent_to(want, out.ndim), (out.sharding, want)
    # partial sums of matmul2 are reduced over the 4-way split, rows stay split 2 ways
    assert out.sharding.shard_shape(out.shape) == (8, 8)


def test_pynative_top_level_call_stays_eager():
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    try:
        net = Hinted()
        out = net(np.ones((4, 16), np.float32))
        assert len(out.sharding.device_set) == 1  # op by op on one device, no planned program
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)
        ms.reset_auto_parallel_context()


def _train_params(save_graphs, path, steps=3):
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=save_graphs, save_graphs_path=str(path))
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    x = np.random.default_rng(2).normal(size=(16, 16)).astype(np.float32)
    y = np.random.default_rng(3).normal(size=(16, 8)).astype(np.float32)
    net = Hinted()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    for _ in range(steps):
        train(x, y)
    return {p.name: p.asnumpy() for p in net.get_parameters()}, train


def test_save_graphs_runs_the_same_executable(tmp_path):
    try:
        plain, _ = _train_params(0, tmp_path / "off")
        dumped, train = _train_params(1, tmp_path / "on")
    finally:
        ms.set_context(save_graphs=0)
    for name in plain:
        np.testing.assert_array_equal(dumped[name], plain[name], err_msg=name)
    assert list((tmp_path / "on").rglob("*execute*.ir")) and not (tmp_path / "off").exists()
    assert train.program.counts.compiles == 1


def test_stages_are_values_with_text():
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    x, y = np.ones((16, 16), np.float32), np.ones((16, 8), np.float32)
    net = Hinted()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    stages = train.program.stages([x, y])
    assert "matmul1" in stages.traced.as_text() or "dot_general" in stages.traced.as_text()
    assert "matmul1#" in stages.planned.as_text() and "((2, 1), (1, 4))" in stages.planned.as_text()
    assert "sharding" in stages.lowered.as_text()
    assert "HloModule" in stages.compiled.as_text() and "all-reduce" in stages.compiled.as_text()
    assert train.program.counts.compiles == 1


def test_slow_compile_notice_names_the_stages(caplog):
    with caplog.at_level(logging.INFO, logger="graphpar"):
        with CompileProgress("Net train step (test)", notice_after_s=0.0) as progress:
            with progress.stage("tracing"):
                pass
            with progress.stage("XLA compile"):
                pass
    text = caplog.text
    assert "compiling Net train step (test)" in text and "tracing" in text and "XLA compile" in text


def test_training_loop_repeat_sees_replaced_values_and_changed_settings():
    """A repeat of the last call runs through the bound step (``compile/runtime/bound_step.py``); a value replaced between
    steps (``set_data``) and a setting changed between steps each make the next step take the general path, and
    that step computes with the new value / setting: numbers against fresh networks started from the same point."""
    ms.set_context(mode=ms.GRAPH_MODE)
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)
    w0, b0 = rng.normal(size=(4, 8)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)

    def make(gradients_mean):
        ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=gradients_mean)
        net = nn.Dense(8, 4)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                                    nn.Momentum(net.trainable_params(), 0.1, 0.0))
        return net, train, train.program.place_inputs([x, y])

    def one_step_from(w, b, gradients_mean):
        ms.reset_auto_parallel_context()
        net, train, placed = make(gradients_mean)
        net.weight.set_data(w)
        net.bias.set_data(b)
        train(*placed)
        return net.weight.asnumpy(), net.bias.asnumpy()

    ref_mean = one_step_from(w0, b0, True)

    ms.reset_auto_parallel_context()
    net, train, placed = make(True)
    for _ in range(3):
        train(*placed)
    bound = train.program._bound
    net.weight.set_data(w0)  # replaced between steps: the next step must start from it
    net.bias.set_data(b0)
    train(*placed)
    np.testing.assert_allclose(net.weight.asnumpy(), ref_mean[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(net.bias.asnumpy(), ref_mean[1], rtol=1e-6, atol=1e-7)
    assert train.program._bound is bound  # same program, its state re-placed

    train(*placed)  # a repeat
    w2, b2 = net.weight.asnumpy(), net.bias.asnumpy()
    ref_sum = one_step_from(w2, b2, False)
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    ms.set_auto_parallel_context(gradients_mean=False)  # changed between steps, nothing else: another program
    train(*placed)
    np.testing.assert_allclose(net.weight.asnumpy(), ref_sum[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(net.bias.asnumpy(), ref_sum[1], rtol=1e-6, atol=1e-7)


def _mse_inference_numpy(net, x, y, activation):
    """MSE of ``net`` (a BNNet) in evaluation mode on (x, y), with ``activation`` between the BatchNorm and fc2."""
    h = x @ net.fc1.weight.asnumpy().T + net.fc1.bias.asnumpy()
    bn = net.bn
    h = (h - bn.moving_mean.asnumpy()) / np.sqrt(bn.moving_variance.asnumpy() + bn.eps)
    h = activation(h * bn.gamma.asnumpy() + bn.beta.asnumpy())
    out = h @ net.fc2.weight.asnumpy().T + net.fc2.bias.asnumpy()
    return float(np.mean(np.square(out - y)))


def test_training_loop_repeat_sees_every_change_between_steps(monkeypatch):
    """The training loop's fast path (``compile/runtime/bound_step.py``) compares two revision numbers, the batch's identity
    and the state's identity instead of every setting, flag and signature. Every change a user can make between
    two steps must still reach the next step: a setting assigned again (same program: re-confirmed, no compile), a
    ``set_train`` on a sub-Cell (the inference graph runs: BatchNorm statistics stay), a sub-Cell replaced (the new
    structure runs: its loss is the numpy one), a Variable assigned (the step starts from it), a batch of
    another shape or dtype (another program) and a donated or deleted array (refused by name: XLA's CPU client would crash
    the process)."""
    from graphpar.errors import DeletedArrayError

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    rng = np.random.default_rng(11)
    x = rng.normal(1.0, 2.0, size=(16, 8)).astype(np.float32)
    y = rng.normal(size=(16, 4)).astype(np.float32)
    net = BNNet()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.05, 0.0))
    program = train.program
    placed = train.program.place_inputs([x, y])
    general = []  # calls that left the fast path
    dispatch = program._dispatch
    monkeypatch.setattr(program, "_dispatch", lambda *a: general.append(1) or dispatch(*a))

    def steps(n=1, batch=placed):
        general.clear()
        for _ in range(n):
            loss = train(*batch)
        return float(np.mean(np.asarray(loss)))

    steps(2)
    compiles, bound = program.counts.compiles, program._bound
    steps(3)
    assert general == [] and program.counts.compiles == compiles  # the repeats took the fast path

    ms.set_auto_parallel_context(gradients_mean=True)  # assigned again, unchanged: re-confirmed, not recompiled
    steps(2)
    assert general == [1] and program._bound is bound and program.counts.compiles == compiles

    net.bn.set_train(False)  # the inference graph: the moving statistics stay as they are
    moving = net.bn.moving_mean.asnumpy()
    loss = steps(2)
    assert general == [1] and program.counts.compiles == compiles + 1
    np.testing.assert_array_equal(net.bn.moving_mean.asnumpy(), moving)

    before = _mse_inference_numpy(net, x, y, np.tanh)
    assert abs(before - _mse_inference_numpy(net, x, y, lambda h: np.maximum(h, 0))) > 1e-3 * before
    net.relu = nn.Tanh()  # a sub-Cell replaced: the next step runs the new structure
    loss = steps(1)
    np.testing.assert_allclose(loss, before, rtol=1e-5)
    assert program.counts.compiles == compiles + 2

    w = rng.normal(size=net.fc2.weight.shape).astype(np.float32)
    net.fc2.weight.set_value(jax.numpy.asarray(w))  # a Variable assignment: the step starts from it
    expected = _mse_inference_numpy(net, x, y, np.tanh)
    np.testing.assert_allclose(steps(1), expected, rtol=1e-5)

    net.bn.set_train(True)
    steps(1)
    assert program.counts.compiles == compiles + 3  # BatchNorm training with tanh: a structure not seen yet
    assert not np.array_equal(net.bn.moving_mean.asnumpy(), moving)

    half = train.program.place_inputs([x[:8], y[:8]])  # another batch shape: another program
    steps(2, half)
    assert general == [1] and program.counts.compiles == compiles + 4
    steps(2)
    assert general == [1] and program.counts.compiles == compiles + 4  # back: found in the cache
    low = train.program.place_inputs([x.astype(np.float16), y])  # another dtype: another program
    steps(2, low)
    assert general == [1] and program.counts.compiles == compiles + 5
    assert low[0].dtype == np.float16

    jax.jit(lambda a: a + 1, donate_argnums=0)(net.fc1.weight.get_value())  # donated away behind the step's back
    with pytest.raises(DeletedArrayError, match="Parameter 'fc1.weight'"):
        train(*placed)
    net.fc1.weight.set_data(rng.normal(size=net.fc1.weight.shape).astype(np.float32))
    steps(1)
    placed[1].delete()
    with pytest.raises(DeletedArrayError, match="input 1 of the batch"):
        train(*placed)
