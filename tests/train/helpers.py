"""Small networks and datasets the train tests share (the MLP is graphpar.models.mlp's)."""

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.models.mlp import MLP  # the 2-layer MLP with deterministic weights (same values in every mode)


def regression_data(n=64, d_in=16, d_out=8, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d_in)).astype(np.float32)
    y = rng.normal(size=(n, d_out)).astype(np.float32)
    return x, y


class ArraySource:
    def __init__(self, *arrays):
        self.arrays = arrays

    def __getitem__(self, i):
        return tuple(a[i] for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])


def array_dataset(*arrays, batch_size, columns=("x", "y"), num_shards=None, shard_id=None):
    return ds.GeneratorDataset(ArraySource(*arrays), list(columns), shuffle=False, num_shards=num_shards,
                               shard_id=shard_id).batch(batch_size, drop_remainder=True)


def train_steps(mode, x, y, steps, gradients_mean=True, lr=0.05, loss=None, pynative=False, sink=False,
                net_seed=0, optimizer="momentum", **ctx):
    """Train a fresh MLP on global batches; returns (params dict, losses)."""
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.PYNATIVE_MODE if pynative else ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=gradients_mean, **ctx)
    net = MLP(x.shape[1], 32, y.shape[1], seed=net_seed)
    opt = (nn.Momentum(net.trainable_params(), lr, 0.9) if optimizer == "momentum"
           else nn.SGD(net.trainable_params(), lr))
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss or nn.MSELoss()), opt)
    program = train.program
    if sink:
        losses = list(np.asarray(program.run_steps([np.stack([x] * steps), np.stack([y] * steps)])))
    else:
        losses = [float(train(x, y)) for _ in range(steps)]
    return {p.name: p.asnumpy() for p in net.get_parameters()}, losses
