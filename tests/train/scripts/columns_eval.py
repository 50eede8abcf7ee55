"""``Model.eval`` and ``Model.predict`` under ``dataset_strategy=((1, n), (1, 1))`` in n processes (used by
tests/train/test_columns_eval.py; not a test itself): each rank reads its own block of the input's columns (and
the whole label), the network is written for the global width. Rank 0 prints ``EVAL <loss>`` and
``PRED <values>``. Usage: columns_eval.py (under ``graphpar launch``)."""

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.communication import get_group_size, get_rank, init
from graphpar.train import Model

ROWS, FEATURES = 16, 8


def data():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    return x, (x @ np.arange(FEATURES, dtype=np.float32)[:, None] / FEATURES).astype(np.float32)


def net():
    weight = np.random.default_rng(0).normal(size=(1, FEATURES)).astype(np.float32)
    return nn.Dense(FEATURES, 1, weight_init=ms.Tensor(weight), bias_init="zeros")


class Columns:
    """Every row, in batches of 8; only block ``shard_id`` of ``x``'s columns."""

    def __init__(self, x, y, num_shards, shard_id):
        width = x.shape[1] // num_shards
        self.x, self.y = x[:, shard_id * width:(shard_id + 1) * width], y

    def get_dataset_size(self):
        return len(self.x) // 8

    def iter_epoch(self, epoch):
        for i in range(self.get_dataset_size()):
            yield self.x[i * 8:(i + 1) * 8], self.y[i * 8:(i + 1) * 8]


def main():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    n, rank = get_group_size(), get_rank()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, dataset_strategy=((1, n), (1, 1)))
    x, y = data()
    model = Model(net(), nn.MSELoss(), metrics={"loss"})
    result = model.eval(Columns(x, y, n, rank))
    blocks = Columns(x, y, n, rank)
    # predict takes the input alone: its strategy has one entry (MindSpore's rule: one per network input)
    ms.set_auto_parallel_context(dataset_strategy=((1, n),))
    out = np.asarray(model.predict(ms.Tensor(blocks.x[:8])))  # readable on every process
    if rank == 0:
        print(f"EVAL {result['loss']:.9g}", flush=True)
        print("PRED " + " ".join(f"{v:.9g}" for v in out.ravel()), flush=True)


if __name__ == "__main__":
    main()
