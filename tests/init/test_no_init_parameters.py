"""``no_init_parameters()`` (MindSpore's ``mindspore.nn.utils.no_init_parameters``): parameters made inside hold
their shape, dtype and initializer only; the first compiled step draws them where they live, in one program, with
the values an eager build with the same seed has."""

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.common.deferred import Deferred
from graphpar.common.initializer import Initializer, Normal, TruncatedNormal, initializer
from graphpar.nn.utils import no_init_parameters
from tests.init.compiles import compiled_names


class Net(nn.Cell):
    """The quickstart's two MatMuls with a bias between them; Normal, zeros and XavierUniform initializers."""

    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(initializer("normal", [32, 64]), "w")
        self.b = ms.Parameter(initializer("zeros", [64]), "b")
        self.w2 = ms.Parameter(initializer("xavier_uniform", [64, 16]), "w2")
        self.matmul = ops.MatMul().shard(((2, 1), (1, 4)))
        self.add = ops.Add().shard(((2, 4), (4,)))
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul().shard(((2, 4), (4, 1)))

    def construct(self, x):
        return self.matmul2(self.relu(self.add(self.matmul(x, self.w), self.b)), self.w2)


def build(deferred: bool, seed: int = 11) -> Net:
    ms.set_seed(seed)
    if not deferred:
        return Net()
    with no_init_parameters():
        return Net()


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 32)).astype(np.float32), rng.normal(size=(16, 16)).astype(np.float32)


def train_cell(net: Net) -> nn.TrainOneStepCell:
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))


def test_parameters_made_inside_hold_no_data():
    net = build(deferred=True)
    for param in net.get_parameters():
        assert param.has_init
        value = param.get_value()
        assert isinstance(value, Deferred) and not isinstance(value, jax.Array)
    assert net.w.shape == (32, 64) and net.w.dtype == np.float32
    assert "shape=(32, 64)" in repr(net.w)


def test_init_parameters_data_draws_the_eager_values():
    eager, lazy = build(deferred=False), build(deferred=True)
    drawn = lazy.init_parameters_data()
    assert sorted(drawn) == ["b", "w", "w2"]
    for name in ("w", "b", "w2"):
        assert not getattr(lazy, name).has_init
        np.testing.assert_array_equal(getattr(lazy, name).asnumpy(), getattr(eager, name).asnumpy())
    assert lazy.init_parameters_data() == {}  # nothing left to draw


def test_asnumpy_and_init_data_draw_one_parameter():
    eager, lazy = build(deferred=False), build(deferred=True)
    np.testing.assert_array_equal(lazy.w2.asnumpy(), eager.w2.asnumpy())
    assert not lazy.w2.has_init and lazy.w.has_init
    assert lazy.w.init_data() is lazy.w and not lazy.w.has_init


def test_set_data_replaces_a_deferred_value_as_a_checkpoint_load_does():
    lazy = build(deferred=True)
    lazy.w.set_data(ms.Tensor(np.ones((32, 64), np.float32)))
    assert not lazy.w.has_init and lazy.w.asnumpy().sum() == 32 * 64
    with pytest.raises(ValueError, match="differs from the parameter's shape"):
        lazy.w2.set_data(ms.Tensor(np.ones((2, 2), np.float32)))


def test_first_semi_auto_step_draws_each_parameter_in_its_layout_in_one_program():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    x, y = data()
    eager = build(deferred=False)
    eager_train = train_cell(eager)
    eager_losses = [float(eager_train(x, y)) for _ in range(3)]
    lazy = build(deferred=True)
    lazy_train = train_cell(lazy)
    with compiled_names() as names:
        lazy_losses = [float(lazy_train(x, y)) for _ in range(3)]
    # one program draws every parameter and creates the optimizer state beside it; then the step itself
    assert names == ["initial_values", "step"]
    assert lazy_losses == eager_losses
    spec = lazy.w.get_value().sharding.spec  # matmul's ((2, 1), (1, 4)): w split by 4 on its columns
    assert tuple(spec)[0] is None and tuple(spec)[1] is not None
    assert lazy.w.get_value().addressable_shards[0].data.shape == (32, 16)
    np.testing.assert_array_equal(lazy.w.asnumpy(), eager.w.asnumpy())


def test_a_forward_call_draws_the_parameters_it_reads():
    eager, lazy = build(deferred=False), build(deferred=True)
    x, _ = data()
    np.testing.assert_array_equal(np.asarray(lazy(ms.Tensor(x))), np.asarray(eager(ms.Tensor(x))))
    assert not any(p.has_init for p in lazy.get_parameters())


@pytest.mark.parametrize("init", [Normal(0.5, 1.0), TruncatedNormal(0.02), "uniform", "he_normal", "he_uniform",
                                  "xavier_normal", "ones", 0.25])
def test_every_initializer_defers_to_the_same_values(init):
    ms.set_seed(3)
    eager = np.asarray(initializer(init, (7, 5, 3)))
    ms.set_seed(3)
    with no_init_parameters():
        param = ms.Parameter(initializer(init, (7, 5, 3)), "p")
    np.testing.assert_array_equal(param.asnumpy(), eager)


def test_parameters_made_from_arrays_are_not_deferred():
    """As MindSpore documents: only ``initializer`` values are skipped; a Tensor or numpy array is data."""
    with no_init_parameters():
        from_numpy = ms.Parameter(ms.Tensor(np.ones((2, 3), np.float32)), "a")
        from_init = ms.Parameter(initializer("ones", (2, 3)), "b")
    assert not from_numpy.has_init and from_init.has_init


class HostOnes(Initializer):
    """A user's initializer written the old way: a numpy ``sample``."""

    def sample(self, shape):
        return np.ones(shape)


def test_a_host_only_initializer_is_drawn_at_once_and_said_so(notices):
    with no_init_parameters():
        param = ms.Parameter(initializer(HostOnes(), (2, 2)), "h")
    assert not param.has_init and param.asnumpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert any("HostOnes draws on the host" in r.getMessage() for r in notices.records)


def test_a_checkpoint_loads_into_deferred_parameters(tmp_path):
    """MindSpore's use of ``no_init_parameters``: build without drawing, then load the trained values."""
    trained = build(deferred=False, seed=2)
    ms.save_checkpoint(trained, str(tmp_path / "net.ckpt"))
    lazy = build(deferred=True, seed=9)
    ms.load_checkpoint(str(tmp_path / "net.ckpt"), net=lazy)
    for name in ("w", "b", "w2"):
        assert not getattr(lazy, name).has_init
        np.testing.assert_array_equal(getattr(lazy, name).asnumpy(), getattr(trained, name).asnumpy())
