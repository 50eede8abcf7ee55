"""Gradient accumulation: micro-batches equal the whole batch; one gradient reduction per optimizer step."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import DatasetError
from graphpar.models.gpt import GPT, gpt_data
from tests.bigmodels.hlo_helpers import loop_collectives, step_collectives
from tests.bigmodels.nets import DenseBatchNorm, data, megatron_mlp, params, wide_mlp


def _train(mode, micro, steps=2, context_steps=None, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True, **ctx)
    if context_steps:
        ms.set_auto_parallel_context(grad_accumulation_step=context_steps)
    net = wide_mlp(16, 32, 8)
    loss = nn.WithLossCell(net, nn.MSELoss(reduction="sum"))
    if micro > 1:
        loss = nn.GradAccumulation(loss, micro)
    train = nn.TrainOneStepCell(loss, nn.SGD(net.trainable_params(), 1e-3))
    x, y = data(32, 16, 8)
    losses = [float(train(x, y)) for _ in range(steps)]
    return net, train, losses


@pytest.mark.parametrize("mode", ["stand_alone", "data_parallel", "semi_auto_parallel"])
def test_four_micro_batches_of_8_equal_one_batch_of_32(mode):
    whole, _, losses = _train(mode, 1)
    accumulated, _, losses_acc = _train(mode, 4)
    np.testing.assert_allclose(losses_acc, losses, rtol=1e-6)
    for name, value in params(accumulated).items():
        np.testing.assert_allclose(value, params(whole)[name], rtol=1e-6, atol=1e-7)


def test_one_gradient_reduction_per_step_in_data_parallel():
    _, train1, _ = _train("data_parallel", 1, steps=0)
    _, train4, _ = _train("data_parallel", 4, steps=0)
    x, y = data(32, 16, 8)
    hlo1 = train1.program.lower_step([x, y]).compile().as_text()
    hlo4 = train4.program.lower_step([x, y]).compile().as_text()
    assert "while" in hlo4  # the micro-batches run in a loop...
    assert loop_collectives(hlo4) == []  # ...that communicates nothing
    once = [(c.kind, c.nbytes) for c in step_collectives(hlo4)]
    assert once == [(c.kind, c.nbytes) for c in step_collectives(hlo1)]
    assert [k for k, _ in once] == ["AllReduce"]  # gradients (and the loss) reduced once, in one all-reduce


def test_a_changed_grad_accumulation_step_reaches_the_next_step():
    """What the train step reads of the settings is one snapshot per compile key: changing grad_accumulation_step
    between steps changes the micro-batches with the plan, and setting it back finds the first program again."""
    _, train, _ = _train("data_parallel", 1, steps=1)
    program = train.program
    first = program.settings
    assert program.micro_size == 1 and program.counts.compiles == 1
    x, y = data(32, 16, 8)
    ms.set_auto_parallel_context(grad_accumulation_step=4)
    train(x, y)
    assert program.micro_size == 4 and program.settings is not first and program.counts.compiles == 2
    assert "while" in program.stages([x, y]).compiled.as_text()  # the micro-batches' loop
    ms.set_auto_parallel_context(grad_accumulation_step=1)
    train(x, y)
    assert train.program is program and program.settings is first and program.counts.compiles == 2


@pytest.mark.slow
def test_context_grad_accumulation_step_and_sharded_accumulation():
    base, _, losses = _train("data_parallel", 4)
    ctx, _, losses_ctx = _train("data_parallel", 1, context_steps=4)
    np.testing.assert_allclose(losses_ctx, losses, rtol=1e-6)
    sharded, train, _ = _train("data_parallel", 4, enable_parallel_optimizer=True,
                               parallel_optimizer_config={"parallel_optimizer_threshold": 0,
                                                          "gradient_accumulation_shard": True})
    for name, value in params(sharded).items():
        np.testing.assert_allclose(value, params(base)[name], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(params(ctx)[name], params(base)[name], rtol=1e-6, atol=1e-7)
    x, y = data(32, 16, 8)
    hlo = train.program.lower_step([x, y]).compile().as_text()
    assert any(c.kind == "ReduceScatter" for c in loop_collectives(hlo))  # reduced into the shards per micro-batch


def test_eager_call_sums_micro_batch_losses_and_bad_batches_are_named():
    net = wide_mlp(16, 32, 8)
    loss = nn.WithLossCell(net, nn.MSELoss(reduction="sum"))
    x, y = data(32, 16, 8)
    total = nn.GradAccumulation(loss, 4)(x, y)
    np.testing.assert_allclose(float(total), float(loss(x, y)), rtol=1e-5)
    with pytest.raises(ValueError, match="micro_size"):
        nn.GradAccumulation(loss, 0)
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    train = nn.TrainOneStepCell(nn.GradAccumulation(loss, 3), nn.SGD(net.trainable_params(), 1e-3))
    with pytest.raises(DatasetError, match="micro_size=3"):
        train(x, y)


def _megatron(micro, reduction, steps, lr=0.05):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = megatron_mlp(dp=2, mp=4)
    loss = nn.WithLossCell(net, nn.MSELoss(reduction=reduction))
    if micro > 1:
        loss = nn.GradAccumulation(loss, micro)
    train = nn.TrainOneStepCell(loss, nn.SGD(net.trainable_params(), lr))
    x, y = data(32, 16, 16)
    losses = [float(train(x, y)) for _ in range(steps)]
    return net, train, losses


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_semi_auto_dp2_mp4_accumulates_per_replica_and_reduces_once(reduction):
    # the accumulated gradient (and the reported loss) is the sum over the 4 micro-batches: with a batch-mean loss
    # that is 4 times the whole batch's, so the whole batch trains with 4 times the learning rate
    factor, lr = (4, 0.05) if reduction == "mean" else (1, 0.05 / 512)
    whole, _, losses = _megatron(1, reduction, 3, lr=lr * factor)
    accumulated, train, losses_acc = _megatron(4, reduction, 3, lr=lr)
    expected = np.asarray(losses) * factor
    np.testing.assert_allclose(losses_acc, expected, rtol=1e-6)
    for name, value in params(accumulated).items():
        np.testing.assert_allclose(value, params(whole)[name], rtol=1e-6, atol=1e-7)
    hlo = train.program.lower_step(list(data(32, 16, 16))).compile().as_text()
    dp_groups = [[0, 4], [1, 5], [2, 6], [3, 7]]  # the mesh is dp(2) x mp(4): ranks r and r + 4 are replicas
    assert "while" in hlo
    assert [c for c in loop_collectives(hlo) if c.groups == dp_groups] == []  # no data-parallel traffic per micro
    once = sorted(s for c in step_collectives(hlo) if c.groups == dp_groups for _, s in c.shapes)
    # one reduction of each parameter's model-parallel slice (w1 (16, 64/4), w2 (64/4, 16)) and of the loss
    assert once == sorted([(), (16, 16), (16, 16)])
    # the micro-batch's graph and one replica's rows' graph, each traced and planned once, and timed
    assert (train.program.counts.traces, train.program.counts.plans) == (2, 2) and train.program.compile_seconds > 0


class _ErrorVariance(nn.Cell):
    """A loss whose rows depend on the whole batch: the variance of the error, mean((d - batch mean of d) ** 2)."""

    def __init__(self):
        super().__init__()
        self.sub, self.center, self.square = ops.Sub(), ops.Sub(), ops.Square()
        self.batch_mean, self.mean = ops.ReduceMean(keep_dims=True), ops.ReduceMean()

    def construct(self, logits, labels):
        d = self.sub(logits, labels)
        return self.mean(self.square(self.center(d, self.batch_mean(d, 0))))


def test_semi_auto_loss_not_separable_per_replica_keeps_global_gradients_and_says_why(notices):
    def run(micro):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
        net = megatron_mlp(dp=2, mp=4)
        loss = nn.WithLossCell(net, _ErrorVariance())
        if micro > 1:
            loss = nn.GradAccumulation(loss, micro)
        train = nn.TrainOneStepCell(loss, nn.SGD(net.trainable_params(), 0.05))
        x, y = data(32, 16, 16)
        [float(train(x, y)) for _ in range(2)]
        return train

    train = run(4)
    assert ("gradient accumulation: the data-parallel gradient reduction is made once per micro-batch because op "
            "'center' (Sub") in notices.text
    assert "computes rows of the batch from a reduction over the batch" in notices.text
    hlo = train.program.lower_step(list(data(32, 16, 16))).compile().as_text()
    dp_groups = [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert any(c.groups == dp_groups for c in loop_collectives(hlo))  # reduced per micro-batch, as said


class _SumOverBatchSize(nn.Cell):
    """sum(d ** 2) / batch size, dividing after the sum or each row before it: the divisor is a constant the trace
    computes from the batch's shape."""

    def __init__(self, divide_rows):
        super().__init__()
        self.divide_rows = divide_rows
        self.sub, self.square, self.sum = ops.Sub(), ops.Square(), ops.ReduceSum()

    def construct(self, logits, labels):
        if self.divide_rows:
            return self.sum(self.square(self.sub(logits, labels)) / logits.shape[0])
        return self.sum(self.square(self.sub(logits, labels))) / logits.shape[0]


@pytest.mark.parametrize("divide_rows", [False, True])
def test_semi_auto_constant_from_the_batch_size_runs_per_replica_with_the_whole_batch_value(divide_rows, notices):
    # one replica's graph divides by its own rows (8); each replica runs it with the micro-batch's divisor (16)
    def run(mode):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, device_num=8)
        net = megatron_mlp(dp=2, mp=4)
        loss = nn.GradAccumulation(nn.WithLossCell(net, _SumOverBatchSize(divide_rows)), 2)
        train = nn.TrainOneStepCell(loss, nn.SGD(net.trainable_params(), 0.01))
        losses = [float(train(*data(32, 16, 16))) for _ in range(2)]
        return net, losses, train.program.lower_step(list(data(32, 16, 16))).compile().as_text()

    net, losses, hlo = run("semi_auto_parallel")
    assert "once per micro-batch" not in notices.text
    dp_groups = [[0, 4], [1, 5], [2, 6], [3, 7]]
    # gradients reduced once per step (the sum made global, a scalar, when the division follows it)
    assert {s for c in loop_collectives(hlo) if c.groups == dp_groups for _, s in c.shapes} <= {()}
    one, losses_one, _ = run("stand_alone")  # a sum over the micro-batches: the same whichever rows each holds
    np.testing.assert_allclose(losses, losses_one, rtol=1e-5)  # |D| = 2 times these with the replica's divisor
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(one)[name], rtol=1e-5, atol=1e-6)


def test_semi_auto_batchnorm_accumulates_per_replica_with_statistics_over_every_replica(notices):
    def run(mode, x, y):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, device_num=8)
        net = DenseBatchNorm()
        loss = nn.GradAccumulation(nn.WithLossCell(net, nn.MSELoss()), 4)
        train = nn.TrainOneStepCell(loss, nn.SGD(net.trainable_params(), 0.05))
        losses = [float(train(x, y)) for _ in range(3)]
        return net, losses, train.program.lower_step([x, y]).compile().as_text()

    x, y = data(64, 16, 8)
    net, losses, hlo = run("semi_auto_parallel", x, y)
    assert "once per micro-batch" not in notices.text
    # per micro-batch only BatchNorm's statistics cross devices (mean and variance, forward and backward: 32
    # floats each); every gradient, the moving statistics' average and the loss once per step
    assert sorted(s for c in loop_collectives(hlo) for _, s in c.shapes) == [(32,)] * 4
    once = sorted(s for c in step_collectives(hlo) for _, s in c.shapes)
    assert (32, 16) in once and (8, 32) in once
    # one device, the same micro-batches: the plan splits the 64 rows over 8 devices and cuts each device's 8 rows
    # in 4 (micro-batch i holds rows 8j + 2i and 8j + 2i + 1)
    order = np.concatenate([[8 * j + 2 * i + k for j in range(8) for k in range(2)] for i in range(4)])
    one, losses_one, _ = run("stand_alone", x[order], y[order])
    np.testing.assert_allclose(losses, losses_one, rtol=1e-5)
    for name, value in params(net).items():  # the moving statistics too (unbiased with the whole batch's count)
        np.testing.assert_allclose(value, params(one)[name], rtol=1e-5, atol=1e-6)


class _RootMeanSquarePlusSum(nn.Cell):
    """A loss that goes on computing after its reductions over the batch, as MindSpore losses often do (a scale,
    an auxiliary term, a penalty): sqrt(mean(d ** 2)) + 1e-3 * sum(logits) + 1e-2 * sum(w2 ** 2)."""

    def __init__(self, w2):
        super().__init__()
        self.w2 = w2
        self.sub, self.square, self.sqrt, self.add = ops.Sub(), ops.Square(), ops.Sqrt(), ops.Add()
        self.mean, self.sum, self.penalty = ops.ReduceMean(), ops.ReduceSum(), ops.ReduceSum()

    def construct(self, logits, labels):
        rms = self.sqrt(self.mean(self.square(self.sub(logits, labels))))
        return self.add(self.add(rms, 1e-3 * self.sum(logits)), 1e-2 * self.penalty(self.square(self.w2)))


@pytest.mark.parametrize("recompute_loss", [False, True])
def test_semi_auto_loss_computed_after_its_reductions_still_reduces_gradients_once(recompute_loss, notices):
    def run(mode, x, y):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, device_num=8)
        net = megatron_mlp(dp=2, mp=4)
        loss_fn = _RootMeanSquarePlusSum(net.w2)
        if recompute_loss:  # the reductions and the loss's tail inside one recomputed run
            loss_fn.recompute()
        loss = nn.GradAccumulation(nn.WithLossCell(net, loss_fn), 4)
        train = nn.TrainOneStepCell(loss, nn.SGD(net.trainable_params(), 0.05))
        return net, train, [float(train(x, y)) for _ in range(3)]

    x, y = data(32, 16, 16)
    net, train, losses = run("semi_auto_parallel", x, y)
    hlo = train.program.lower_step([x, y]).compile().as_text()
    # the same micro-batches on one device: SEMI_AUTO's plan splits the inputs over the 8 devices and cuts each
    # device's 4 rows in 4 (micro-batch i holds rows i, 4 + i, ..., 28 + i); contiguous micro-batches of these rows
    # hold the same samples
    order = np.concatenate([[4 * j + i for j in range(8)] for i in range(4)])
    one, _, losses_one = run("stand_alone", x[order], y[order])
    np.testing.assert_allclose(losses, losses_one, rtol=1e-5)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(one)[name], rtol=1e-5, atol=1e-6)
    assert "once per micro-batch" not in notices.text
    dp_groups = [[0, 4], [1, 5], [2, 6], [3, 7]]
    # per micro-batch only the reductions' values cross replicas (scalars); each gradient once per step
    in_loop = [s for c in loop_collectives(hlo) if c.groups == dp_groups for _, s in c.shapes]
    assert in_loop and set(in_loop) == {()}
    once = sorted(s for c in step_collectives(hlo) if c.groups == dp_groups for _, s in c.shapes)
    assert once == sorted([(), (16, 16), (16, 16)])


def test_gpt_semi_auto_dp2_mp4_four_micro_batches_equal_the_whole_batch_reduced_once():
    # graphpar.models.gpt: ids (batch, seq) split over fewer devices than the (batch * seq) labels, both cut into the
    # same micro-batches; Megatron strategies inside each data-parallel replica
    def run(micro, lr):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
        net = GPT(dp=2, mp=4)
        loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        train = nn.TrainOneStepCell(nn.GradAccumulation(loss, micro) if micro > 1 else loss,
                                    nn.SGD(net.trainable_params(), lr))
        batch = gpt_data(batch=16)
        return net, train, [float(train(*batch)) for _ in range(2)], batch

    whole, _, losses, _ = run(1, 0.4)  # a batch-mean loss: 4 micro-batches sum to 4 times its gradient
    accumulated, train, losses_acc, batch = run(4, 0.1)
    np.testing.assert_allclose(losses_acc, 4 * np.asarray(losses), rtol=1e-6)
    for name, value in params(accumulated).items():
        np.testing.assert_allclose(value, params(whole)[name], rtol=1e-6, atol=1e-7)
    hlo = train.program.lower_step(list(batch)).compile().as_text()
    dp_groups = [[0, 4], [1, 5], [2, 6], [3, 7]]
    # no gradient is reduced per micro-batch; the one collective left in the loop is the sparse loss's label range
    # check (ops.runtime_checks: the largest and smallest out-of-range label, two int32s, over the labels' devices)
    in_loop = [c for c in loop_collectives(hlo) if c.groups == dp_groups]
    assert [c for c in in_loop if any(dtype != "s32" for dtype, _ in c.shapes)] == []
    assert len(in_loop) <= 1 and all(int(np.prod(shape)) == 2 for c in in_loop for _, shape in c.shapes)
    once = sorted(s for c in step_collectives(hlo) if c.groups == dp_groups for _, s in c.shapes)
    shards = sorted(p.get_raw_value().addressable_shards[0].data.shape for p in accumulated.trainable_params())
    assert once == sorted(shards + [()])  # each parameter's gradient slice once, and the loss


def test_inputs_split_over_different_device_counts_are_cut_by_the_same_blocks():
    from graphpar.compile.runtime.accumulate import check_batch, cut_blocks

    # (batch, seq) ids over 4 devices and (batch * seq,) labels over 8: cut in 4 blocks, so micro-batch i of both
    # holds the same samples
    assert cut_blocks([(16, 16), (256,), ()], [4, 8, 1]) == 4
    assert cut_blocks([(24, 4), (24,)], [2, 3]) == 1  # no common block structure: contiguous micro-batches
    with pytest.raises(DatasetError, match="micro_size=4"):
        check_batch([(8, 16), (128,)], 4, [4, 8])  # 8 rows in 4 blocks cannot give 4 micro-batches per block
