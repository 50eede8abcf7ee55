"""Tensor, Parameter, dtype and initializer: constructed as MindSpore does, usable wherever a jax.Array is."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor
from graphpar.common import dtype as mstype
from graphpar.common.initializer import HeUniform, Normal, TruncatedNormal, XavierUniform, initializer


def test_tensor_is_a_jax_array():
    t = Tensor(np.array([[1, 2], [3, 4]], np.float32))
    assert isinstance(t, jax.Array) and isinstance(t, Tensor)
    assert jnp.sum(t) == 10
    assert Tensor(1.0).dtype == jnp.float32
    assert Tensor(1).dtype in (jnp.int32, jnp.int64)
    assert Tensor(True).dtype == jnp.bool_
    assert Tensor([1.5, 2.5], mstype.float16).dtype == jnp.float16
    assert Tensor(np.ones(3)).dtype == jnp.float32  # float64 numpy → float32 (x64 off)
    assert Tensor(shape=(2, 3), dtype=ms.float32, init="ones").shape == (2, 3)
    assert not isinstance(np.ones(3), Tensor)


def test_dtype_names():
    import graphpar.common.dtype as mstype2
    from graphpar import dtype as mstype3

    assert mstype2.float32 == mstype3.float32 == np.float32 == ms.float32
    assert mstype.ms_name(mstype.float32) == "Float32" and mstype.ms_name(mstype.int32) == "Int32"
    assert mstype.pytype_to_dtype(float) == mstype.float32


def test_parameter_surface():
    p = Parameter(initializer("normal", [4, 3]), name="w")
    assert p.name == "w" and p.shape == (4, 3) and p.dtype == np.float32 and p.requires_grad
    assert isinstance(p, Tensor)
    assert isinstance(p.asnumpy(), np.ndarray)
    p.set_data(Tensor(np.ones((4, 3), np.float32)))
    np.testing.assert_array_equal(p.asnumpy(), np.ones((4, 3)))
    with pytest.raises(ValueError, match="'w'.*shape"):
        p.set_data(np.ones((2, 2), np.float32))
    assert "name=w" in repr(p) and "Float32" in repr(p)
    q = Parameter(Tensor(np.zeros(3, np.float32)), "b", requires_grad=False, layerwise_parallel=True)
    assert not q.requires_grad and q.layerwise_parallel
    assert jnp.sum(p + 1) == 24  # usable in arithmetic
    assert jnp.dot(jnp.ones(4), p).shape == (3,)


def test_initializers_follow_mindspore_defaults():
    ms.set_seed(3)
    w = np.asarray(initializer("normal", (256, 256)))
    assert abs(w.std() - 0.01) < 0.001  # Normal sigma 0.01
    z = np.asarray(initializer("zeros", (2, 2)))
    assert (z == 0).all()
    assert np.asarray(initializer(0.5, (2,))).tolist() == [0.5, 0.5]
    t = np.asarray(initializer(TruncatedNormal(0.02), (4096,)))
    assert np.abs(t).max() <= 0.04 + 1e-7
    x = np.asarray(initializer(XavierUniform(), (30, 20)))
    assert np.abs(x).max() <= np.sqrt(6 / 50) + 1e-6
    h = np.asarray(initializer(HeUniform(), (30, 20)))
    assert np.abs(h).max() <= np.sqrt(6 / 20) + 1e-6
    assert initializer(Normal(), (2, 3), ms.float16).dtype == jnp.float16
    with pytest.raises(ValueError, match="unknown initializer 'gaussian'"):
        initializer("gaussian", (2,))


def test_set_seed_makes_initialization_reproducible():
    ms.set_seed(7)
    a = np.asarray(initializer("normal", (5,)))
    ms.set_seed(7)
    b = np.asarray(initializer("normal", (5,)))
    np.testing.assert_array_equal(a, b)


def test_parameter_value_is_mindspore_method_inside_construct():
    """MindSpore's ``param.value()`` returns the Tensor held, in eager code and inside a compiled construct (where
    it is the traced value); NNX state keeps working (the step updates the Parameter through split/merge)."""
    from graphpar import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.full((2, 3), 2.0, np.float32)), name="w")

        def construct(self, x):
            return x * self.w.value(), self.w.value()

    net = Net()
    assert np.array_equal(np.asarray(net.w.value()), np.full((2, 3), 2.0, np.float32))
    out, table = net(Tensor(np.ones((2, 3), np.float32)))
    assert np.array_equal(np.asarray(out), np.full((2, 3), 2.0)) and np.array_equal(np.asarray(table), np.full((2, 3), 2.0))
    net.w.set_data(Tensor(np.zeros((2, 3), np.float32)))
    assert float(np.asarray(net.w.value()).sum()) == 0.0
