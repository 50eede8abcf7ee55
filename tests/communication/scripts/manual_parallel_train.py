"""MindSpore-style manual parallel (STAND_ALONE, one device per process), used by tests/communication/
test_manual_parallel.py (not a test itself).

Each rank builds the network with its own slice of the weights, as a manual tensor-parallel script does:

* ``w1``: rank r's block of columns of a (4, HIDDEN) matrix: ``h_r = relu(x @ w1_r)``, this rank's hidden units;
* ``w2``: rank r's block of rows of a (HIDDEN, 1) matrix: ``AllReduce(h_r @ w2_r)`` sums the ranks' partial
  products (a row-parallel layer);
* ``w3``: a whole (HIDDEN, 1) matrix on every rank, applied to every rank's hidden units gathered with
  ``AllGather`` (which concatenates along dimension 0, so ``h_r`` is transposed around it).

Every rank reads the whole dataset (no sharding) and trains with ``Model.train`` in STAND_ALONE, with no gradient
reduction: each rank updates its own slices from the gradients MindSpore's collective rules give. Prints
``LOSS <rank> <step> <loss>`` after each step (each sink) and ``PARAM <rank> <name> <json list>`` at the end.
Usage: manual_parallel_train.py [EPOCHS] [sink|save DIR]; ``save DIR``: after training, ``save_checkpoint`` the
per-rank weights into DIR (refused by name: a graphpar checkpoint holds one value per name), printing ``SAVE
REFUSED <message>``.
"""

import json
import sys

import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.communication import get_group_size, get_rank, init
from graphpar.train import Callback, Model

HIDDEN = 8
LR, MOMENTUM = 0.005, 0.9


def data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 4)).astype(np.float32)
    y = (np.sin(x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32))).astype(np.float32)
    return x, y


def global_weights():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(4, HIDDEN)).astype(np.float32) * 0.5,
            rng.normal(size=(HIDDEN, 1)).astype(np.float32) * 0.5,
            rng.normal(size=(HIDDEN, 1)).astype(np.float32) * 0.5)


class Arrays:
    """The smallest dataset Model.train accepts: fixed batches of arrays."""

    def __init__(self, x, y, batch):
        self.x, self.y, self.batch = x, y, batch

    def get_dataset_size(self):
        return len(self.x) // self.batch

    def iter_epoch(self, epoch):
        for i in range(self.get_dataset_size()):
            yield self.x[i * self.batch:(i + 1) * self.batch], self.y[i * self.batch:(i + 1) * self.batch]


class ManualNet(nn.Cell):
    def __init__(self, rank, size):
        super().__init__()
        w1, w2, w3 = global_weights()
        cols = slice(rank * HIDDEN // size, (rank + 1) * HIDDEN // size)
        self.w1 = ms.Parameter(ms.Tensor(w1[:, cols]), name="w1")
        self.w2 = ms.Parameter(ms.Tensor(w2[cols]), name="w2")
        self.w3 = ms.Parameter(ms.Tensor(w3), name="w3")
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()
        self.transpose = ops.Transpose()
        self.all_reduce = ops.AllReduce()
        self.all_gather = ops.AllGather()

    def construct(self, x):
        h = self.relu(self.matmul(x, self.w1))                         # (batch, HIDDEN / size): this rank's units
        row_parallel = self.all_reduce(self.matmul(h, self.w2))        # (batch, 1): summed over the ranks
        every_h = self.transpose(self.all_gather(self.transpose(h, (1, 0))), (1, 0))  # (batch, HIDDEN)
        return row_parallel + self.matmul(every_h, self.w3)


class Record(Callback):
    """This rank's loss after each step (in sink mode, after each sink: the loss of its last step)."""

    def step_end(self, run_context):
        args = run_context.original_args()
        loss = float(np.asarray(args.net_outputs))
        print(f"LOSS {get_rank()} {args.cur_step_num} {loss:.9g}", flush=True)


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    sink = len(sys.argv) > 2 and sys.argv[2] == "sink"
    save_into = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "save" else None
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    x, y = data()
    net = ManualNet(get_rank(), get_group_size())
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), LR, MOMENTUM))
    model.train(epochs, Arrays(x, y, batch=4), callbacks=[Record()], dataset_sink_mode=sink)
    if save_into is not None:
        from graphpar.checkpoint import CheckpointError, save_checkpoint

        try:
            save_checkpoint(net, f"{save_into}/net.ckpt")
        except CheckpointError as exc:
            print(f"SAVE REFUSED {exc}", flush=True)
    for p in net.trainable_params():
        print(f"PARAM {get_rank()} {p.name} {json.dumps(p.asnumpy().reshape(-1).tolist())}", flush=True)
