"""Small networks, datasets and callbacks the checkpoint tests share."""

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.models.mlp import MLP
from graphpar.train import Callback
from tests.planner.helpers import quickstart_net, rand  # noqa: F401  (used by the tests)
from tests.train.helpers import ArraySource as Arrays  # noqa: F401  (used here and by the tests)


def dropout_mlp(seed=0) -> MLP:
    """An MLP with Dropout (its key is state a checkpoint must carry) and deterministic weights."""
    return MLP(16, 32, 8, seed=seed, dropout=0.25)


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
