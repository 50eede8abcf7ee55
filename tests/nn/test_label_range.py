"""Labels outside [0, classes) are refused by name, checked inside the compiled step without a host sync per step
(issue 27, item 2's range half; ``ops.runtime_checks``). Before, labels 4, 9 and -1 on a 4-class head gave loss and
gradient 0 for their samples and training exited 0; MindSpore's kernel raises."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops
from graphpar.errors import RuntimeCheckError
from graphpar.ops import nn_ops, runtime_checks
from graphpar.train import Model
from tests.planner.helpers import collectives

X = np.tile(np.eye(4, dtype=np.float32), (4, 1))  # 16 samples of a 4-class problem
GOOD = np.arange(16, dtype=np.int32) % 4
BAD = GOOD.copy()
BAD[[3, 9, 12]] = [4, 9, -1]


def _drop_pending():
    try:
        runtime_checks.flush()
    except RuntimeCheckError:
        pass


@pytest.fixture(autouse=True)
def _fresh():
    """Each test starts with no failed check left over and restores the settings it changes."""
    _drop_pending()
    yield
    _drop_pending()
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)


def _dense():
    return nn.Dense(4, 4, weight_init=ms.Tensor(np.eye(4, dtype=np.float32)), bias_init="zeros")


class SparseOpNet(nn.Cell):
    """The primitive ``ops.SparseSoftmaxCrossEntropyWithLogits`` as the network's loss."""

    def __init__(self):
        super().__init__()
        self.dense = _dense()
        self.ce = ops.SparseSoftmaxCrossEntropyWithLogits()

    def construct(self, x, y):
        return self.ce(self.dense(x), y)


def _data(labels, batch=8):
    return ds.NumpySlicesDataset((X, labels), ["x", "y"], shuffle=False).batch(batch)


def _model(net=None):
    net = net or _dense()
    return net, Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net.trainable_params(), 0.1, 0.9))


def test_bad_labels_in_model_train_raise_by_the_end_of_the_epoch_naming_the_op():
    _, model = _model()
    with pytest.raises(RuntimeCheckError) as caught:
        model.train(1, _data(BAD))
    message = str(caught.value)
    assert "op 'one_hot' (OneHot)" in message and "_loss_fn-SoftmaxCrossEntropyWithLogits" in message
    assert "labels outside the valid range [0, 4)" in message and "class indices 0..3" in message
    # raised at the first check point after a bad step finished: the first batch's 4, or both batches' -1 to 9
    assert re.search(r"reached (1 step\(s\) \(out-of-range value 4\)|2 step\(s\) \(out-of-range values from -1 "
                     r"to 9\))", message), message


def test_the_primitive_checks_too_in_an_eager_style_train_cell_call():
    net = SparseOpNet()
    train = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    train(ms.Tensor(X), ms.Tensor(BAD))  # returns at once: the check is read later
    jax.effects_barrier()
    with pytest.raises(RuntimeCheckError, match=r"op 'ce' \(SparseSoftmaxCrossEntropyWithLogits\) in scope "
                                                r"Default/network-SparseOpNet: labels outside .*\[0, 4\)"):
        train(ms.Tensor(X), ms.Tensor(GOOD))  # the next step's dispatch raises the last one's failure


def test_a_forward_call_checks_too():
    net = SparseOpNet()
    net(ms.Tensor(X), ms.Tensor(BAD))
    jax.effects_barrier()
    with pytest.raises(RuntimeCheckError, match="op 'ce'"):
        net(ms.Tensor(X), ms.Tensor(GOOD))


def test_pynative_mode_checks_too():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    _, model = _model()
    with pytest.raises(RuntimeCheckError, match="op 'one_hot'"):
        model.train(1, _data(BAD))


def test_valid_labels_train_without_a_callback_or_a_sync_per_step(monkeypatch):
    calls = {"record": 0, "barrier": 0}
    record, barrier = runtime_checks._record, jax.effects_barrier

    def counted_record(*args):
        calls["record"] += 1
        return record(*args)

    def counted_barrier():
        calls["barrier"] += 1
        return barrier()

    monkeypatch.setattr(runtime_checks, "_record", counted_record)
    monkeypatch.setattr(jax, "effects_barrier", counted_barrier)
    net, model = _model()
    model.train(3, _data(GOOD, batch=2))  # 8 steps an epoch
    assert calls == {"record": 0, "barrier": 3}  # no host callback on a valid step; one wait per epoch
    assert np.isfinite(net.weight.asnumpy()).all()


def _step_hlo(monkeypatch, checked: bool) -> str:
    if not checked:
        monkeypatch.setattr(nn_ops, "check_index_range", lambda *args: None)
    net = SparseOpNet()
    train = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    hlo = train.program.stages([X, GOOD]).compiled.as_text()
    monkeypatch.undo()
    return hlo


@pytest.mark.parametrize("mode", ["semi_auto_parallel", "data_parallel"])
def test_on_8_devices_bad_labels_raise_and_the_step_itself_carries_no_check(monkeypatch, mode):
    """Labels taken straight from the batch are checked beside the step, not in it: the step's program is the
    unchecked one (no conditional, no callback, no extra collective). In the program, a GPU copied the check's
    predicate to the host mid-step, which doubled a ResNet-50 step on an H100."""
    ms.set_auto_parallel_context(parallel_mode=mode, device_num=8)
    unchecked = collectives(_step_hlo(monkeypatch, checked=False))
    ms.set_auto_parallel_context(parallel_mode=mode, device_num=8)
    hlo = _step_hlo(monkeypatch, checked=True)
    assert collectives(hlo) == unchecked
    assert "conditional" not in hlo and "callback" not in hlo.lower()
    ms.set_auto_parallel_context(parallel_mode=mode, device_num=8)
    net, model = _model(SparseOpNet())
    model = Model(net, optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9))
    with pytest.raises(RuntimeCheckError, match=r"op .ce.*values from -1 to 9"):
        model.train(1, _data(BAD, batch=16))


def test_a_host_batch_with_bad_labels_is_refused_before_its_step_runs():
    net = SparseOpNet()
    train = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    train(X, GOOD)
    before = np.asarray(net.dense.weight.asnumpy()).copy()
    with pytest.raises(RuntimeCheckError, match=r"op 'ce'.*values from -1 to 9"):
        train(X, BAD)
    np.testing.assert_array_equal(net.dense.weight.asnumpy(), before)  # the bad step did not run


class _CastLabelsNet(nn.Cell):
    """Labels the network computes (a Cast) rather than takes from the batch: checked inside the program."""

    def __init__(self):
        super().__init__()
        self.weight = ms.Parameter(ms.Tensor(np.eye(4, dtype=np.float32)), "weight")
        self.matmul, self.cast = ops.MatMul(), ops.Cast()
        self.ce = ops.SparseSoftmaxCrossEntropyWithLogits()

    def construct(self, x, labels):
        return self.ce(self.matmul(x, self.weight), self.cast(labels, ms.int32))


def test_labels_computed_in_the_network_are_checked_in_the_program():
    net = _CastLabelsNet()
    train = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    assert "conditional" in train.program.stages([X, GOOD.astype(np.int64)]).compiled.as_text()
    train(X, BAD.astype(np.int64))
    with pytest.raises(RuntimeCheckError, match=r"op 'ce'.*values from -1 to 9"):
        runtime_checks.flush()


def test_a_step_without_the_loss_op_has_no_check():
    net = _dense()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    hlo = train.program.stages([X, X]).compiled.as_text()
    assert "conditional" not in hlo and "callback" not in hlo.lower()


def test_a_run_without_a_checked_op_never_waits_for_checks(monkeypatch):
    monkeypatch.setattr(runtime_checks, "_sites", set())
    waits = []
    monkeypatch.setattr(jax, "effects_barrier", lambda: waits.append(1))
    net = _dense()
    Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(
        2, ds.NumpySlicesDataset((X, X), ["x", "y"], shuffle=False).batch(8))
    assert waits == []


def _functional_step(computed_labels: bool):
    """MindSpore 2.x's functional loop over SparseOpNet; ``computed_labels``: the step passes labels it computes."""
    net = SparseOpNet()
    optimizer = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    grad_fn = ms.value_and_grad(lambda x, y: net(x, y), None, optimizer.parameters)

    @ms.jit
    def train_step(x, y):
        loss, grads = grad_fn(x, y * 1 if computed_labels else y)
        optimizer(grads)
        return loss

    return net, train_step


def test_a_functional_step_checks_labels_from_its_inputs_beside_the_step():
    net, train_step = _functional_step(computed_labels=False)
    train_step(X, GOOD)
    (entry,) = train_step.programs.values()
    hlo = entry.program.lowered([X, GOOD]).lowered.compile().as_text()
    assert "conditional" not in hlo and "callback" not in hlo.lower()
    before = np.asarray(net.dense.weight.asnumpy()).copy()
    with pytest.raises(RuntimeCheckError, match=r"op 'ce'.*values from -1 to 9"):
        train_step(X, BAD)
    np.testing.assert_array_equal(net.dense.weight.asnumpy(), before)


def test_a_functional_step_checks_labels_it_computes_in_the_program():
    _, train_step = _functional_step(computed_labels=True)
    train_step(X, BAD)
    with pytest.raises(RuntimeCheckError, match=r"op 'ce'.*values from -1 to 9"):
        runtime_checks.flush()
