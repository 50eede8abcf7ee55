"""MindSpore's mixed-precision step under ``@ms.jit``: ``is_finite = amp.all_finite(grads); if is_finite:
optimizer(grads)``. MindSpore's graph mode compiles an ``if`` on a Tensor as control flow; graphpar rewrites the step's
source (``ir.control_flow``) so that the ``if`` runs both branches and merges what they write (the Parameters and the
optimizer's state the update writes, the names they bind) with ``jnp.where``. The step trains in every parallel mode,
skips the update on a step whose gradients overflow, and equals the same loop written with ``jnp.where`` by hand.
A Cell's ``construct`` in GRAPH_MODE compiles its ``if`` on a Tensor the same way."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import amp, nn, ops
from graphpar.errors import JitError, TracedControlFlowError
from graphpar.parallel.auto_parallel import AutoParallel

RNG = np.random.default_rng(3)
X = RNG.normal(size=(16, 16)).astype(np.float32)
Y = RNG.normal(size=(16, 8)).astype(np.float32)
OVERFLOW_STEP = 2


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 8)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def _batch(step):
    """The data of ``step``; the overflow step's holds an inf, so its gradients are not finite."""
    x = X.copy()
    if step == OVERFLOW_STEP:
        x[0, 0] = np.inf
    return ms.Tensor(x), ms.Tensor(Y)


def _mixed_precision_loop(by_hand, optimizer_cls=nn.SGD, steps=5, auto_parallel=False):
    """The tutorial's functional loop (``if is_finite: optimizer(grads)``) or, ``by_hand``, the same loop with the
    gradients of a non-finite step zeroed with ``jnp.where`` (equal for plain SGD); ``auto_parallel``: the step is
    not decorated but wrapped, ``AutoParallel(train_step, parallel_mode="semi_auto")``. Returns what each step
    saw."""
    ms.set_seed(5)
    net, loss_fn = Net(), nn.MSELoss()
    optimizer = optimizer_cls(net.trainable_params(), 0.05)
    loss_scaler = amp.DynamicLossScaler(scale_value=2**10, scale_factor=2, scale_window=2)

    def forward_fn(data, label):
        logits = net(data)
        return loss_scaler.scale(loss_fn(logits, label)), logits

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

    def train_step(data, label):
        (loss, _), grads = grad_fn(data, label)
        grads = loss_scaler.unscale(grads)
        is_finite = amp.all_finite(grads)
        if is_finite:
            optimizer(grads)
        loss_scaler.adjust(is_finite)
        return loss_scaler.unscale(loss)

    @ms.jit
    def hand_step(data, label):
        (loss, _), grads = grad_fn(data, label)
        grads = loss_scaler.unscale(grads)
        is_finite = amp.all_finite(grads)
        optimizer(tuple(jnp.where(is_finite, g, 0.0) for g in grads))
        loss_scaler.adjust(is_finite)
        return loss_scaler.unscale(loss)

    step = hand_step if by_hand else (AutoParallel(train_step, parallel_mode="semi_auto") if auto_parallel
                                      else ms.jit(train_step))
    seen = []
    for i in range(steps):
        params = [p.asnumpy().copy() for p in net.trainable_params()]
        state = [np.asarray(a).copy() for a in jax.tree.leaves(optimizer.opt_state)]
        loss = float(step(*_batch(i)))
        seen.append({"loss": loss, "scale": float(loss_scaler.scale_value.asnumpy()),
                     "params": params, "state": state})
    seen.append({"params": [p.asnumpy().copy() for p in net.trainable_params()],
                 "state": [np.asarray(a).copy() for a in jax.tree.leaves(optimizer.opt_state)]})
    return seen


@pytest.mark.parametrize("mode", [ms.ParallelMode.SEMI_AUTO_PARALLEL, ms.ParallelMode.DATA_PARALLEL])
def test_if_is_finite_skips_the_update_on_overflow_and_equals_the_hand_written_select(mode):
    ms.set_auto_parallel_context(parallel_mode=mode)
    seen = _mixed_precision_loop(by_hand=False)
    overflow, after = seen[OVERFLOW_STEP], seen[OVERFLOW_STEP + 1]
    assert np.isnan(overflow["loss"]) and not np.isnan([s["loss"] for s in seen[:-1] if s is not overflow]).any()
    for before, now in zip(overflow["params"], after["params"]):  # the overflow step updated nothing
        np.testing.assert_array_equal(before, now)
    for i in range(len(seen) - 1):  # every other step did
        if i != OVERFLOW_STEP:
            assert any(not np.array_equal(a, b) for a, b in zip(seen[i]["params"], seen[i + 1]["params"]))
    # the scale: x2 after two finite steps (scale_window=2), /2 on the overflow
    assert [s["scale"] for s in seen[:-1]] == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0]
    assert seen[3]["loss"] < seen[0]["loss"]
    hand = _mixed_precision_loop(by_hand=True)
    np.testing.assert_allclose([s["loss"] for s in seen[:-1]], [s["loss"] for s in hand[:-1]], rtol=1e-6)
    for a, b in zip(seen[-1]["params"], hand[-1]["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_auto_parallel_of_the_undecorated_step_compiles_its_if():
    seen = _mixed_precision_loop(by_hand=False, auto_parallel=True)
    assert [s["scale"] for s in seen[:-1]] == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0]
    hand = _mixed_precision_loop(by_hand=True)
    np.testing.assert_allclose([s["loss"] for s in seen[:-1]], [s["loss"] for s in hand[:-1]], rtol=1e-6)


def test_the_skipped_step_keeps_the_optimizer_state():
    """Momentum's accumulators are state the update writes: the overflow step keeps them as they were."""
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL)
    seen = _mixed_precision_loop(by_hand=False, optimizer_cls=lambda p, lr: nn.Momentum(p, lr, 0.9), steps=4)
    kept, next_step = seen[OVERFLOW_STEP + 1]["state"], seen[OVERFLOW_STEP]["state"]
    assert kept and len(kept) == len(next_step)
    for before, now in zip(next_step, kept):
        np.testing.assert_array_equal(before, now)
    assert any(not np.array_equal(a, b) for a, b in zip(seen[1]["state"], seen[2]["state"]))


def test_else_and_elif_on_traced_values_in_a_step():
    """``if``/``elif``/``else`` choosing a factor from the loss, against the loop written with nested selects."""
    def run(by_hand):
        ms.set_seed(2)
        net, loss_fn = Net(), nn.MSELoss()
        optimizer = nn.SGD(net.trainable_params(), 0.1)
        grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)

        @ms.jit
        def train_step(data, label):
            loss, grads = grad_fn(data, label)
            if loss > 2.0:
                factor = 0.25
            elif loss > 1.0:
                factor = 0.5
            else:
                factor = 1.0
            optimizer(tuple(g * factor for g in grads))
            return loss

        @ms.jit
        def hand_step(data, label):
            loss, grads = grad_fn(data, label)
            factor = jnp.where(loss > 2.0, 0.25, jnp.where(loss > 1.0, 0.5, 1.0))
            optimizer(tuple(g * factor for g in grads))
            return loss

        step = hand_step if by_hand else train_step
        return [float(step(ms.Tensor(X * s), ms.Tensor(Y))) for s in (3.0, 1.0, 0.3, 3.0)]

    losses = run(False)
    np.testing.assert_allclose(losses, run(True), rtol=1e-6)


def test_a_name_bound_in_one_branch_and_read_after_is_refused_at_its_line():
    net = Net()
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    grad_fn = ms.value_and_grad(lambda x, y: nn.MSELoss()(net(x), y), None, optimizer.parameters)

    @ms.jit
    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        if loss > 1.0:
            note = loss * 2  # bound here only, read after the if: refused
        optimizer(grads)
        return note

    line = inspect.getsourcelines(train_step.__wrapped__)[1] + 3
    with pytest.raises(TracedControlFlowError) as raised:
        train_step(*_batch(0))
    message = str(raised.value)
    assert message.startswith(f"{__file__}:{line} (`if loss > 1.0:`): `note` is bound in the `if` branch only")
    assert "assign `note` before the `if`, or in both branches" in message


def test_an_if_that_returns_from_a_traced_branch_is_refused_at_its_line():
    net = Net()
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    grad_fn = ms.value_and_grad(lambda x, y: nn.MSELoss()(net(x), y), None, optimizer.parameters)

    @ms.jit
    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        if not amp.all_finite(grads):
            return loss
        optimizer(grads)
        return loss

    line = inspect.getsourcelines(train_step.__wrapped__)[1] + 3
    with pytest.raises(TracedControlFlowError) as raised:
        train_step(*_batch(0))
    assert str(raised.value).startswith(f"{__file__}:{line} (`if not amp.all_finite(grads):`): an `if` on a traced "
                                        "value whose branch leaves the function with `return` is not compiled")
    assert "Assign the result in both branches" in str(raised.value)


def test_an_if_in_a_helper_the_step_calls_is_compiled_too():
    """MindSpore's graph mode compiles the functions a step calls: an `if` on a Tensor in a helper function of the
    user's code is compiled as one in the step is (the helper is rewritten when the rewritten step calls it); one
    whose branch returns is refused at the helper's own line."""
    def run(clip):
        ms.set_seed(5)
        net = Net()
        optimizer = nn.SGD(net.trainable_params(), 0.1)
        grad_fn = ms.value_and_grad(lambda x, y: nn.MSELoss()(net(x), y), None, optimizer.parameters)

        @ms.jit
        def train_step(data, label):
            loss, grads = grad_fn(data, label)
            optimizer(clip(grads))
            return loss

        return [float(train_step(*_batch(0))) for _ in range(3)]

    def halved_if_finite(grads):
        if amp.all_finite(grads):
            grads = tuple(g * 0.5 for g in grads)
        return grads

    def halved(grads):
        return tuple(g * 0.5 for g in grads)

    np.testing.assert_allclose(run(halved_if_finite), run(halved), rtol=1e-6)  # finite gradients: halved

    def returns_early(grads):
        if amp.all_finite(grads):
            return tuple(g * 0.5 for g in grads)
        return grads

    with pytest.raises(TracedControlFlowError) as raised:
        run(returns_early)
    line = inspect.getsourcelines(returns_early)[1] + 1
    assert str(raised.value).startswith(f"{__file__}:{line} (`if amp.all_finite(grads):`): an `if` on a traced "
                                        "value whose branch leaves the function with `return` is not compiled")


class Gate(nn.Cell):
    """A construct with an ``if`` on a Tensor that binds a value in both branches and counts, in a Parameter, the
    calls that took the first branch."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)
        self.hits = ms.Parameter(ms.Tensor(np.zeros((), np.float32)), name="hits", requires_grad=False)
        self.sum = ops.ReduceSum()

    def construct(self, x):
        h = self.fc(x)
        if self.sum(h) > 0:
            out = h * 2
            self.hits.set_value(self.hits.get_value() + 1)
        else:
            out = -h
        return out


def test_an_if_on_a_tensor_in_construct_compiles_in_graph_mode():
    ms.set_seed(0)
    net = Gate()
    x = np.ones((8, 4), np.float32)
    sign = 1.0 if float(np.sum(np.asarray(net.fc(ms.Tensor(x))))) > 0 else -1.0  # an input taking each branch
    for data, hits in ((sign * x, 1.0), (-sign * x, 1.0), (sign * x, 2.0)):
        ms.set_context(mode=ms.PYNATIVE_MODE)
        eager = np.asarray(net.fc(ms.Tensor(data)))
        expected = eager * 2 if eager.sum() > 0 else -eager
        ms.set_context(mode=ms.GRAPH_MODE)
        np.testing.assert_allclose(np.asarray(net(ms.Tensor(data))), expected, rtol=1e-6)
        assert float(net.hits.asnumpy()) == hits


class GateBySelect(Gate):
    """``Gate`` written with ``ops.Select`` by hand (no Parameter counted)."""

    def construct(self, x):
        h = self.fc(x)
        return ops.Select()(self.sum(h) > 0, h * 2, -h)


def test_a_construct_with_an_if_on_a_tensor_trains_in_semi_auto_as_its_select_form():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    x = RNG.normal(size=(16, 4)).astype(np.float32)
    y = np.ones((16, 4), np.float32)
    losses = {}
    for cls in (Gate, GateBySelect):
        ms.set_seed(0)
        net = cls()
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        losses[cls] = [float(train(ms.Tensor(x), ms.Tensor(y))) for _ in range(4)]
    assert losses[Gate][-1] < losses[Gate][0]
    np.testing.assert_allclose(losses[Gate], losses[GateBySelect], rtol=1e-6)
