"""``ops.Print`` eagerly and from inside compiled programs (a GRAPH_MODE forward, a train step): MindSpore's layout,
one print per run of the program with that run's values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import Tensor, nn, ops


def test_eager_print_in_mindspores_layout(capsys):
    ops.Print()("Print Tensor x and Tensor y:", Tensor(np.ones([2, 1], np.int32)), Tensor(np.ones([2, 2], np.int32)))
    assert capsys.readouterr().out == ("Print Tensor x and Tensor y:\n"
                                       "Tensor(shape=[2, 1], dtype=Int32, value=\n[[1]\n [1]])\n"
                                       "Tensor(shape=[2, 2], dtype=Int32, value=\n[[1 1]\n [1 1]])\n")
    with pytest.raises(TypeError, match="Print: inputs must be Tensor"):
        ops.Print()(object())


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4, weight_init="ones", bias_init="zeros")
        self.print = ops.Print()

    def construct(self, x):
        out = self.fc(x)
        self.print("sum is:", out.sum())
        return out


@pytest.mark.parametrize("mode", ["stand_alone", "semi_auto_parallel"])
def test_print_inside_compiled_programs(capsys, notices, mode):
    ms.set_auto_parallel_context(parallel_mode=mode)
    net = Net()
    net(jnp.ones((8, 4)))
    net(2 * jnp.ones((8, 4)))
    jax.effects_barrier()
    assert capsys.readouterr().out == ("sum is:\nTensor(shape=[], dtype=Float32, value=\n128.0)\n"
                                       "sum is:\nTensor(shape=[], dtype=Float32, value=\n256.0)\n")
    model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.0))
    data = ds.NumpySlicesDataset((np.ones((16, 4), np.float32), np.zeros((16, 4), np.float32)), ["x", "y"],
                                 shuffle=False).batch(8)
    model.train(1, data)  # two steps: the train step prints on every run (the global batch's sum)
    jax.effects_barrier()
    assert capsys.readouterr().out.count("sum is:\nTensor(shape=[], dtype=Float32, value=\n") == 2
    assert "no sharding rule" not in notices.text  # a print has no output to place: no fallback warning
