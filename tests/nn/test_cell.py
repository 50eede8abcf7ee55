"""Cell: registration, MindSpore parameter names, traversal, modes, and the errors users hit first."""

import numpy as np
import pytest

from graphpar import Parameter, Tensor, nn, ops
from graphpar.common.initializer import initializer
from graphpar.errors import CellError


class Inner(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 3)
        self.scale = Parameter(Tensor(np.ones(3, np.float32)), "scale")
        self.mul = ops.Mul()

    def construct(self, x):
        return self.mul(self.fc1(x), self.scale)


class Outer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = Inner()
        self.w = Parameter(initializer("normal", [3, 2]), "w")
        self.matmul = ops.MatMul()

    def construct(self, x):
        return self.matmul(self.body(x), self.w)


def test_parameter_names_follow_attribute_paths():
    net = Outer()
    names = dict(net.parameters_and_names())
    assert set(names) == {"w", "body.fc1.weight", "body.fc1.bias", "body.scale"}
    assert {p.name for p in net.get_parameters()} == {"w", "body.fc1.weight", "body.fc1.bias", "body.scale"}
    assert len(net.trainable_params()) == 4
    assert net.matmul.instance_name == "matmul" and net.body.fc1.matmul.instance_name == "matmul"


def test_cells_and_names_and_call():
    net = Outer()
    assert [n for n, _ in net.cells_and_names()] == ["", "body", "body.fc1"]
    out = net(np.ones((5, 4), np.float32))
    assert out.shape == (5, 2)


def test_set_train_reaches_every_cell():
    net = Outer()
    net.set_train()
    assert all(c.training for _, c in net.cells_and_names())
    net.set_train(False)
    assert not any(c.training for _, c in net.cells_and_names())


def test_cell_without_construct_is_a_clear_error():
    class NoConstruct(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(2, 2)

    with pytest.raises(CellError) as err:
        NoConstruct()(np.ones((1, 2), np.float32))
    assert "NoConstruct" in str(err.value) and "construct" in str(err.value) and "\n" not in str(err.value)


def test_parameter_name_used_twice_is_a_clear_error():
    class Twice(nn.Cell):
        def __init__(self):
            super().__init__()
            self.a = Parameter(Tensor(np.ones(2, np.float32)), "w")
            self.b = Parameter(Tensor(np.ones(2, np.float32)), "w")

        def construct(self, x):
            return x * self.a * self.b

    net = Twice()
    with pytest.raises(CellError) as err:
        net.check_names()
    assert "'w'" in str(err.value) and "'a'" in str(err.value) and "'b'" in str(err.value)
    with pytest.raises(CellError):
        nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params()))(
            np.ones((8, 2), np.float32), np.ones((8, 2), np.float32))


def test_subclass_that_skips_super_init_still_works():
    class Lazy(nn.Cell):
        def __init__(self):
            self.fc = nn.Dense(2, 2)

        def construct(self, x):
            return self.fc(x)

    net = Lazy()
    assert [n for n, _ in net.parameters_and_names()] == ["fc.weight", "fc.bias"]


def test_sequential_and_cell_list():
    seq = nn.SequentialCell([nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 2)])
    assert seq(np.ones((3, 4), np.float32)).shape == (3, 2)
    assert [n for n, _ in seq.parameters_and_names()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    cl = nn.CellList([nn.Dense(2, 2), nn.Dense(2, 2)])
    assert len(cl) == 2 and len(list(cl[1].get_parameters())) == 2
