"""Seed 004 (distributed quick start) as a MindSpore user ports it: the imports changed, nothing else but what the
test varies (the matmul's strategy for the device count, the parallel mode). Trains the seed's network in several
modes, one after another, in this process's device count; prints one JSON line per mode: its losses and the IR
dump directories it wrote.

    python quickstart_port.py DUMP_DIR STRATEGY MODE[:SEARCH] ...
"""

import json
import os
import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import ops
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter
from graphpar.communication import get_rank, init
from graphpar.nn import Cell, Momentum, MSELoss
from graphpar.train import Callback, Model


def get_dataset(batch_size, in_dim, out_dim, step_per_epoch):
    np.random.seed(1)
    input_data = np.random.rand(batch_size, in_dim).astype(np.float32)
    label_data = np.random.rand(batch_size, out_dim).astype(np.float32)

    def generate():
        for _ in range(step_per_epoch):
            yield (input_data, label_data)

    return generate


class Net(Cell):
    """define net"""

    def __init__(self, in_dim, hidden_dim, out_dim, strategy):
        super().__init__()
        self.in_dim = in_dim
        self.hidden_dim = hidden_dim
        self.out_dim = out_dim
        self.weight = Parameter(initializer("normal", [self.in_dim, self.hidden_dim]), "w")
        self.weight2 = Parameter(initializer("normal", [self.hidden_dim, self.out_dim]), "w2")
        self.matmul = ops.MatMul().shard(strategy)
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        out = self.matmul(x, self.weight)
        out = self.relu(out)
        out = self.matmul2(out, self.weight2)
        return out


class Losses(Callback):
    def __init__(self):
        self.values = []

    def step_end(self, run_context):
        self.values.append(float(np.asarray(run_context.original_args().net_outputs)))


def main(dump_root, strategy, runs):
    init()
    for run in runs:
        mode, _, search = run.partition(":")
        path = os.path.join(dump_root, run.replace(":", "_"))
        ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU", save_graphs=2, save_graphs_path=path)
        ms.reset_auto_parallel_context()
        extra = {"search_mode": search} if search else {}
        ms.set_auto_parallel_context(parallel_mode=mode, dataset_strategy="data_parallel", gradients_mean=True,
                                     **extra)
        np.random.seed(0)
        dataset = ds.GeneratorDataset(get_dataset(2, 32, 16, 4), ["input", "label"])
        net = Net(32, 16, 16, strategy)
        losses = Losses()
        opt = Momentum(net.trainable_params(), 0.2, 0.1)
        model = Model(net, loss_fn=MSELoss(), optimizer=opt)
        model.train(2, dataset, callbacks=[losses], dataset_sink_mode=False)
        dumps = {d: sorted(os.listdir(os.path.join(path, d))) for d in sorted(os.listdir(path))} if os.path.isdir(
            path) else {}
        print(json.dumps({"run": run, "rank": get_rank(), "losses": losses.values, "dumps": dumps}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], eval(sys.argv[2]), sys.argv[3:])
