"""Batches that are each process's own part of the global batch, under several processes (used by
tests/train/test_global_batch.py; not a test itself).

Every rank reads its own shard of a 120-row dataset in batches of 20 rows; with 4 ranks the last batch of each
shard has 10 rows, so the last global batch has 40. Prints ``LOSS <step> <loss>`` from rank 0. Usage:
accum_train.py MODE, MODE one of

- ``model``: ``Model.train`` of ``GradAccumulation(WithLossCell(net), 2)`` under SEMI_AUTO_PARALLEL;
- ``loop``: the same Cell in a ``TrainOneStepCell`` called in a custom loop with ``Tensor`` batches (each rank's
  Tensor is its own rows, as MindSpore's are);
- ``columns``: ``dataset_strategy=((1, n), (1, 1))``: each rank reads its own block of the input's columns (and
  the whole label), and the network is written for the global shape.
"""

import sys

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.communication import get_group_size, get_rank, init
from graphpar.parallel.nn import GradAccumulation
from graphpar.train import Callback, Model

ROWS, BATCH, FEATURES, LR = 120, 20, 8, 0.01


def data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    y = (x @ np.arange(FEATURES, dtype=np.float32)[:, None] / FEATURES).astype(np.float32)
    return x, y


class Shard:
    """Rows ``shard_id::num_shards`` of ``x, y`` in batches of ``batch`` (the last one partial); with ``columns``
    every row, and only block ``shard_id`` of ``x``'s columns."""

    def __init__(self, x, y, batch, num_shards, shard_id, columns=False):
        self.x, self.y, self.batch = x, y, batch
        self.num_shards, self.shard_id, self.columns = num_shards, shard_id, columns

    def _rows(self):
        if self.columns:
            width = self.x.shape[1] // self.num_shards
            return self.x[:, self.shard_id * width:(self.shard_id + 1) * width], self.y
        return self.x[self.shard_id::self.num_shards], self.y[self.shard_id::self.num_shards]

    def get_dataset_size(self):
        return -(-len(self._rows()[0]) // self.batch)

    def iter_epoch(self, epoch):
        x, y = self._rows()
        for i in range(self.get_dataset_size()):
            yield x[i * self.batch:(i + 1) * self.batch], y[i * self.batch:(i + 1) * self.batch]


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.fc = nn.Dense(FEATURES, 1, weight_init=ms.Tensor(rng.normal(size=(1, FEATURES)).astype(np.float32)),
                           bias_init="zeros")

    def construct(self, x):
        return self.fc(x)


class Record(Callback):
    def step_end(self, run_context):
        args = run_context.original_args()
        if get_rank() == 0:
            print(f"LOSS {args.cur_step_num} {float(np.asarray(args.net_outputs)):.9g}", flush=True)


def main(mode):
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    n, rank = get_group_size(), get_rank()
    x, y = data()
    if mode == "columns":
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL,
                                     dataset_strategy=((1, n), (1, 1)))
        net = Net()
        model = Model(net, nn.MSELoss(reduction="sum"), nn.SGD(net.trainable_params(), LR))
        model.train(1, Shard(x, y, BATCH, n, rank, columns=True), callbacks=[Record()])
        return
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    net = GradAccumulation(nn.WithLossCell(Net(), nn.MSELoss(reduction="sum")), 2)
    if mode == "model":
        Model(net, optimizer=nn.SGD(net.trainable_params(), LR)).train(1, Shard(x, y, BATCH, n, rank),
                                                                        callbacks=[Record()])
        return
    train = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), LR))
    for step, (xb, yb) in enumerate(Shard(x, y, BATCH, n, rank).iter_epoch(0)):
        loss = train(ms.Tensor(xb), ms.Tensor(yb))
        if rank == 0:
            print(f"LOSS {step + 1} {float(np.asarray(loss)):.9g}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
    print(f"DONE process {ms.communication.get_process_index()}", flush=True)
