"""Tiny DATA_PARALLEL training run used by the multi-process tests (not a test itself).

Calls init() (so it works under graphpar launch, Dynamic Cluster variables, mpirun or alone), trains a small
Dense network with Model.train on a dataset sharded over all ranks (as the seeds' create_dataset does), and prints
one line per step, ``LOSS <step> <loss>``, from the process holding rank 0. Usage: dp_train.py [EPOCHS] [SINK]
"""

import sys

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.communication import get_group_size, get_rank, init
from graphpar.train import Callback, Model


class ShardedArrays:
    """The smallest dataset Model.train accepts: batches of a fixed array, optionally sharded by rank."""

    def __init__(self, x, y, batch, num_shards=None, shard_id=None):
        self.x, self.y, self.batch, self.num_shards, self.shard_id = x, y, batch, num_shards, shard_id

    def shard_info(self):
        return self.num_shards, self.shard_id

    def with_shard(self, num_shards, shard_id):
        return ShardedArrays(self.x, self.y, self.batch, num_shards, shard_id)

    def _rows(self):
        if self.num_shards is None:
            return self.x, self.y
        return self.x[self.shard_id::self.num_shards], self.y[self.shard_id::self.num_shards]

    def get_dataset_size(self):
        return len(self._rows()[0]) // self.batch

    def iter_epoch(self, epoch):
        x, y = self._rows()
        for i in range(self.get_dataset_size()):
            yield x[i * self.batch:(i + 1) * self.batch], y[i * self.batch:(i + 1) * self.batch]


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.fc1 = nn.Dense(4, 8, weight_init=ms.Tensor(rng.normal(size=(8, 4)).astype(np.float32)),
                            bias_init="zeros")
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(8, 1, weight_init=ms.Tensor(rng.normal(size=(1, 8)).astype(np.float32)),
                            bias_init="zeros")

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class Record(Callback):
    def __init__(self):
        self.step = 0

    def step_end(self, run_context):
        self.step += 1
        loss = float(np.mean(np.asarray(run_context.original_args().net_outputs)))
        if get_rank() == 0:
            print(f"LOSS {self.step} {loss:.9g}", flush=True)


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    sink = len(sys.argv) > 2 and sys.argv[2] == "sink"
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(128, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    data = ShardedArrays(x, y, batch=2, num_shards=get_group_size(), shard_id=get_rank())
    net = Net()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    model.train(epochs, data, callbacks=[Record()], dataset_sink_mode=sink)
    print(f"DONE process {ms.communication.get_process_index()}", flush=True)
