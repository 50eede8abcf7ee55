"""The training loop's fast path (``compile/runtime/bound_step.py``) and the optimizer state: a state replaced
between two steps (assigned, loaded) is the one the next step starts from, placed where the program wants it; an
array of it deleted or donated behind the step's back is refused by name, never handed to XLA (whose CPU client
crashes the process on one)."""

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.errors import DeletedArrayError

LR, MOMENTUM = 0.1, 0.9


class _Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 4)

    def construct(self, x):
        return self.fc1(x)


def _loop(monkeypatch, optimizer=nn.Momentum):
    """A data-parallel train step after two steps on the fast path, with ``steps(n)`` (the losses) and
    ``general`` (the calls that left the fast path)."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    rng = np.random.default_rng(3)
    net = _Net()
    opt = nn.Momentum(net.trainable_params(), LR, MOMENTUM) if optimizer is nn.Momentum else optimizer(
        net.trainable_params(), LR)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    placed = train.program.place_inputs([rng.normal(size=(16, 8)).astype(np.float32),
                                         rng.normal(size=(16, 4)).astype(np.float32)])
    general = []
    dispatch = train.program._dispatch
    monkeypatch.setattr(train.program, "_dispatch", lambda *a: general.append(1) or dispatch(*a))

    def steps(n=1):
        general.clear()
        return [float(np.asarray(train(*placed))) for _ in range(n)]

    steps(1)  # binds the step
    steps(2)
    assert general == []
    return net, opt, train, placed, general, steps


@pytest.fixture()
def loop(monkeypatch):
    return _loop(monkeypatch)


def _leaf(state, slot: str, param: str) -> jax.Array:
    (leaf,) = [v for p, v in jax.tree_util.tree_flatten_with_path(state)[0]
               if jax.tree_util.keystr(p).endswith(f".{slot}['{param}']")]
    return leaf


def test_an_optimizer_state_array_donated_elsewhere_is_refused_by_name(loop):
    net, opt, train, placed, general, steps = loop
    trace = _leaf(opt.opt_state, "trace", "fc1.weight")
    jax.jit(lambda a: a + 1, donate_argnums=0)(trace)  # donated away behind the step's back
    with pytest.raises(DeletedArrayError, match="optimizer state 'trace' of Parameter 'fc1.weight' is a deleted "
                                                "array.*assign optimizer.opt_state a live state"):
        train(*placed)
    opt.opt_state = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), opt.opt_state)  # a live state again
    assert all(np.isfinite(steps(2))) and general == [1]  # placed once, then the fast path


def test_a_deleted_step_count_of_adam_is_named_too(monkeypatch):
    _, opt, train, placed, _, _ = _loop(monkeypatch, nn.Adam)
    (count,) = [v for p, v in jax.tree_util.tree_flatten_with_path(opt.opt_state)[0]
                if jax.tree_util.keystr(p).endswith(".count")]
    count.delete()
    with pytest.raises(DeletedArrayError, match="optimizer state 'count' is a deleted array"):
        train(*placed)


def test_a_replaced_optimizer_state_is_the_one_the_next_step_starts_from(loop):
    """A momentum of 1000 put in place of the trained one: the next update is -lr * (0.9 * 1000 + grad), so the
    weight moves by about 90, not by the step's own small update (a stale state)."""
    net, opt, _, _, general, steps = loop
    big = 1000.0
    opt.opt_state = jax.tree_util.tree_map_with_path(
        lambda p, a: np.full(a.shape, big, a.dtype) if ".trace[" in jax.tree_util.keystr(p) else np.asarray(a),
        opt.opt_state)
    before = net.fc1.weight.asnumpy()
    steps(1)
    assert general == [1]  # the general path placed the new state
    moved = before - net.fc1.weight.asnumpy()
    np.testing.assert_allclose(moved, LR * MOMENTUM * big, rtol=0.01)
    placed_state = _leaf(opt.opt_state, "trace", "fc1.weight")
    assert isinstance(placed_state, jax.Array) and placed_state.sharding == net.fc1.weight.get_value().sharding
    steps(2)
    assert general == []  # and the loop is back on the fast path


def test_reading_the_state_between_steps_keeps_the_fast_path(loop):
    """``opt.opt_state`` hands the arrays out: the next step checks them for deletion in the fast path (no
    re-binding), and the state it writes is unlent again."""
    _, opt, _, _, general, steps = loop
    leaves = jax.tree.leaves(opt.opt_state)
    assert opt._box.lent and all(not a.is_deleted() for a in leaves)
    losses = steps(2)
    assert general == [] and all(np.isfinite(losses)) and not opt._box.lent
    assert all(a.is_deleted() for a in leaves)  # the step donated them: what was read is the state before it


def test_the_loss_scale_cells_outputs_are_checked_without_lending_the_state(monkeypatch):
    """TrainOneStepWithLossScaleCell returns the overflow flag and the scale, arrays of the optimizer state, from
    every step: they alone are checked before the next one (the state stays unlent, so the fast path does not
    flatten it), and the scale donated elsewhere is refused by name."""
    ms.set_context(mode=ms.GRAPH_MODE)
    net = _Net()
    train = nn.TrainOneStepWithLossScaleCell(nn.WithLossCell(net, nn.MSELoss()),
                                             nn.Momentum(net.trainable_params(), LR, MOMENTUM),
                                             nn.FixedLossScaleUpdateCell(128.0))
    placed = train.program.place_inputs([np.ones((16, 8), np.float32), np.zeros((16, 4), np.float32)])
    train(*placed)
    general = []
    dispatch = train.program._dispatch
    monkeypatch.setattr(train.program, "_dispatch", lambda *a: general.append(1) or dispatch(*a))
    for _ in range(2):
        loss, overflow, scale = train(*placed)
    assert general == [] and not train.optimizer._box.lent  # the fast path, the state unlent
    assert float(scale) == 128.0 and not bool(overflow)
    jax.jit(lambda a: a * 2, donate_argnums=0)(scale)
    with pytest.raises(DeletedArrayError, match="optimizer state 'scale' is a deleted array"):
        train(*placed)
