"""Small networks, datasets and callbacks the checkpoint tests share."""

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import Parameter, Tensor, nn, ops
from graphpar.train import Callback
from tests.train.helpers import ArraySource as Arrays  # noqa: F401  (used here and by the tests)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


class QuickstartNet(nn.Cell):
    """The seed quickstart's network (tests/planner/test_propagation.py), with the hint scaled to the devices."""

    def __init__(self, hint=((2, 4), (4, 1))):
        super().__init__()
        self.weight = Parameter(Tensor(rand(32, 16, seed=1) * 0.1), "w")
        self.weight2 = Parameter(Tensor(rand(16, 16, seed=2) * 0.1), "w2")
        self.matmul = ops.MatMul().shard(hint) if hint is not None else ops.MatMul()
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul(x, self.weight)), self.weight2)


class DropoutMLP(nn.Cell):
    """An MLP with Dropout (its key is state a checkpoint must carry) and deterministic weights."""

    def __init__(self, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc1 = nn.Dense(16, 32, weight_init=Tensor(rng.normal(0, 0.3, (32, 16)).astype(np.float32)),
                            bias_init="zeros", activation="relu")
        self.drop = nn.Dropout(p=0.25)
        self.fc2 = nn.Dense(32, 8, weight_init=Tensor(rng.normal(0, 0.3, (8, 32)).astype(np.float32)),
                            bias_init="zeros")

    def construct(self, x):
        return self.fc2(self.drop(self.fc1(x)))


def shuffled_dataset(n=96, batch=8, seed=7):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 16)).astype(np.float32)
    y = rng.normal(size=(n, 8)).astype(np.float32)
    ds.config.set_seed(seed)
    return ds.GeneratorDataset(Arrays(x, y), ["x", "y"], shuffle=True).batch(batch, drop_remainder=True)


class Record(Callback):
    """Losses and (epoch, step-in-epoch) of every step."""

    def __init__(self):
        self.losses, self.where = [], []

    def step_end(self, run_context):
        cb = run_context.original_args()
        self.losses.append(np.float32(np.mean(np.asarray(cb.net_outputs))))
        self.where.append((cb.cur_epoch_num, (cb.cur_step_num - 1) % cb.batch_num + 1))


class StopAt(Callback):
    def __init__(self, step):
        self.step = step

    def step_end(self, run_context):
        if run_context.original_args().cur_step_num >= self.step:
            run_context.request_stop()


def params(net):
    return {p.name: p.asnumpy() for p in net.get_parameters()}


def momentum_model(net, lr=0.05):
    return ms.Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), lr, 0.9))
