"""``ops.Dropout(keep_prob)(x)`` without a key, as MindSpore calls it: the op draws its key from graphpar's seed and
advances it on every call, so masks differ call to call and repeat under ``set_seed``, eagerly and inside compiled
programs (the key is network state of the Cell holding the op)."""

import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops


def test_eager_masks_advance_and_repeat_under_set_seed():
    x = jnp.ones((16, 16))
    ms.set_seed(1)
    drop = ops.Dropout(0.5)
    (out1, mask1), (_, mask2) = drop(x), drop(x)
    assert mask1.dtype == jnp.bool_ and bool((mask1 != mask2).any())
    np.testing.assert_array_equal(out1.asnumpy(), np.where(mask1, 2.0, 0.0))  # kept elements scaled by 1/keep_prob
    ms.set_seed(1)
    again = ops.Dropout(0.5)
    np.testing.assert_array_equal(again(x)[1], mask1)
    np.testing.assert_array_equal(again(x)[1], mask2)
    fixed = [ops.Dropout(0.5, Seed0=3, Seed1=4)(x)[1] for _ in range(2)]  # fixed op seeds: no draw from the seed
    np.testing.assert_array_equal(fixed[0], fixed[1])
    with pytest.raises(ValueError, match=r"keep_prob must be in \(0, 1\]"):
        ops.Dropout(0.0)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(8, 8)
        self.drop = ops.Dropout(keep_prob=0.5)

    def construct(self, x):
        out, _ = self.drop(self.fc(x))
        return out


def _run(mode):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode)
    ms.set_seed(2)
    net = Net()
    x = jnp.ones((8, 8))
    first, second = net(x).asnumpy(), net(x).asnumpy()  # compiled forward calls (GRAPH_MODE)
    key_before = np.asarray(net.drop.rng.get_value())  # a copy: the train step donates the state it updates
    model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1))
    data = ds.NumpySlicesDataset((np.ones((16, 8), np.float32), np.zeros((16, 8), np.float32)), ["x", "y"],
                                 shuffle=False).batch(8)
    model.train(1, data)
    return first, second, key_before, np.asarray(net.drop.rng.get_value()), net.fc.weight.asnumpy()


@pytest.mark.parametrize("mode", ["stand_alone", "data_parallel", "semi_auto_parallel"])
def test_inside_compiled_programs(mode):
    first, second, key_before, key_after, weight = _run(mode)
    assert (first != second).any()  # each call draws a new mask
    assert (np.asarray(key_before) != np.asarray(key_after)).any()  # the train step advanced the op's key
    again = _run(mode)
    for a, b in zip((first, second, key_before, key_after, weight), again):
        np.testing.assert_array_equal(a, b)


def test_mindspores_one_entry_strategy():
    class Sharded(nn.Cell):
        def __init__(self):
            super().__init__()
            self.drop = ops.Dropout(0.8).shard(((8, 1),))  # MindSpore's form: x only

        def construct(self, x):
            return self.drop(x)[0]

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    assert Sharded().drop.in_strategy == ((8, 1), ())
    assert Sharded()(jnp.ones((8, 4))).shape == (8, 4)


class _Doubled(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dropout = ops.Dropout(0.5)

    def construct(self, x):
        return self.dropout(x)[0] * 2.0


class _InputGrad(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.grad = ops.GradOperation()

    def construct(self, x):
        return self.grad(self.net)(x)


@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE])
def test_under_a_gradient_taken_in_construct(mode):
    """The gradient of a masked, scaled input is the mask times 4 (2 / keep_prob); the key advances per call."""
    ms.set_context(mode=mode)
    grad = _InputGrad(_Doubled())
    x = ms.Tensor(np.ones((16, 16), np.float32))
    first, second = grad(x).asnumpy(), grad(x).asnumpy()
    assert set(np.unique(first)) == {0.0, 4.0}
    assert (first != second).any()
