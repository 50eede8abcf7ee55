"""Model.train / eval / predict with MindSpore's callbacks, LossMonitor format and metrics."""

import re

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.train import Callback, LossMonitor, Model, TimeMonitor
from graphpar.train.metrics import Accuracy, Loss

from .helpers import array_dataset

LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is (\S+)$")


def _classification(n=64, d=8, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (np.argmax(x @ rng.normal(size=(d, classes)), axis=1)).astype(np.int32)
    return x, y


def test_loss_monitor_prints_mindspore_lines(capsys):
    x, y = _classification()
    net = nn.Dense(8, 10, weight_init="zeros", bias_init="zeros")  # logits 0: loss = ln 10 at step 1
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.1, 0.9))
    model.train(2, array_dataset(x, y, batch_size=16), callbacks=[LossMonitor()])
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("epoch")]
    assert len(lines) == 8
    assert lines[0] == "epoch: 1 step: 1, loss is 2.3025851"
    for i, line in enumerate(lines):
        epoch, step, loss = LINE.match(line).groups()
        assert (int(epoch), int(step)) == (i // 4 + 1, i % 4 + 1)
        assert loss == str(np.float32(loss))  # printed as a float32
    assert float(LINE.match(lines[-1]).group(3)) < float(LINE.match(lines[0]).group(3))


def test_loss_monitor_per_print_times_and_sink(capsys):
    x, y = _classification()
    net = nn.Dense(8, 10)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.1, 0.9))
    model.train(2, array_dataset(x, y, batch_size=16), callbacks=[LossMonitor(2)])
    assert [l.split(",")[0] for l in capsys.readouterr().out.splitlines()] == [
        "epoch: 1 step: 2", "epoch: 1 step: 4", "epoch: 2 step: 2", "epoch: 2 step: 4"]
    model.train(2, array_dataset(x, y, batch_size=16), callbacks=[LossMonitor()], dataset_sink_mode=True)
    assert [l.split(",")[0] for l in capsys.readouterr().out.splitlines()] == ["epoch: 1 step: 4",
                                                                                "epoch: 2 step: 4"]


def test_callbacks_see_mindspore_hooks_in_order():
    calls = []

    class Recorder(Callback):
        def on_train_begin(self, rc):
            calls.append("begin")

        def epoch_begin(self, rc):  # the older alias is called by on_train_epoch_begin
            calls.append(f"epoch_begin {rc.original_args().cur_epoch_num}")

        def on_train_step_end(self, rc):
            cb = rc.original_args()
            calls.append(f"step {cb.cur_step_num} {cb.batch_num}")

        def epoch_end(self, rc):
            calls.append("epoch_end")
            if rc.original_args().cur_epoch_num == 2:
                rc.request_stop()

        def end(self, rc):
            calls.append("end")

    x, y = _classification(32)
    net = nn.Dense(8, 10)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.SGD(net.trainable_params(), 0.1))
    model.train(5, array_dataset(x, y, batch_size=16), callbacks=[Recorder(), TimeMonitor()])
    assert calls == ["begin", "epoch_begin 1", "step 1 2", "step 2 2", "epoch_end", "epoch_begin 2", "step 3 2",
                     "step 4 2", "epoch_end", "end"]


def test_eval_returns_metrics_and_training_improves_accuracy():
    x, y = _classification(256, seed=3)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    net = nn.Dense(8, 10)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.1, 0.9), metrics={"acc", "loss"})
    before = model.eval(array_dataset(x, y, batch_size=32))
    model.train(5, array_dataset(x, y, batch_size=4))  # 4 per device x 8 devices
    after = model.eval(array_dataset(x, y, batch_size=32))
    assert set(after) == {"acc", "loss"}
    assert after["acc"] > before["acc"] + 0.2 and after["loss"] < before["loss"]
    assert model.predict(x[:8]).shape == (8, 10)


def test_metric_objects_and_names():
    m = Accuracy()
    m.update(np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1]))
    assert m.eval() == 0.5
    loss = Loss()
    loss.update(np.array(2.0))
    loss.update(np.array(4.0))
    assert loss.eval() == 3.0
    with pytest.raises(ValueError, match="unknown metric 'accuray'"):
        Model(nn.Dense(2, 2), nn.MSELoss(), metrics={"accuray"})


def test_data_parallel_draws_one_batch_per_device(capsys):
    # seed 004's semantics: a 2-row batch per device, 8 devices → the matmul sees a (16, 32) global batch
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    shapes = []

    class Peek(Callback):
        def step_begin(self, rc):
            shapes.append(rc.original_args().train_dataset_element[0].shape)

    def generate():
        for _ in range(4):
            yield np.ones((2, 32), np.float32), np.ones((2, 16), np.float32)

    net = nn.Dense(32, 16)
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.2, 0.1))
    model.train(1, ds.GeneratorDataset(generate, ["input", "label"]), callbacks=[Peek(), LossMonitor()])
    assert shapes == [(16, 32)] * 4
    assert len(capsys.readouterr().out.splitlines()) == 4


def test_sharded_dataset_gives_each_device_its_shard():
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    x = np.arange(64, dtype=np.float32).reshape(64, 1) * np.ones((1, 4), np.float32)
    y = np.zeros((64, 2), np.float32)
    seen = []

    class Peek(Callback):
        def step_begin(self, rc):
            seen.append(rc.original_args().train_dataset_element[0][:, 0].astype(int).tolist())

    net = nn.Dense(4, 2)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.0))
    model.train(1, array_dataset(x, y, batch_size=2, num_shards=8, shard_id=0), callbacks=[Peek()])
    # shard r holds rows r, r+8, ...; each step stacks one 2-row batch of every shard, in rank order
    assert seen[0] == [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    assert len(seen) == 4 and sorted(sum(seen, [])) == list(range(64))


def test_eval_after_train_and_set_data_between_steps_in_auto_parallel():
    from graphpar import ops

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(32, 16)
            self.fc.matmul.shard(((2, 4), (1, 4)))
            self.relu = ops.ReLU()
            self.out = nn.Dense(16, 8)

        def construct(self, x):
            return self.out(self.relu(self.fc(x)))

    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 32)).astype(np.float32), rng.normal(size=(64, 8)).astype(np.float32)
    net = Net()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics={"loss"})
    model.train(1, array_dataset(x, y, batch_size=2))
    first = model.eval(array_dataset(x, y, batch_size=16))["loss"]
    model.train(1, array_dataset(x, y, batch_size=2))  # parameters back in the train layout
    net.fc.weight.set_data(np.zeros((16, 32), np.float32))  # a host value replaced between steps
    model.train(1, array_dataset(x, y, batch_size=2))
    assert np.isfinite(model.eval(array_dataset(x, y, batch_size=16))["loss"]) and np.isfinite(first)
