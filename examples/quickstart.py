"""MindSpore's distributed-parallel quick start ported to graphpar.

The only changes from the MindSpore script: the imports, `init()` without "nccl" (it picks the backend of the
platform), `device_target` from the environment (CPU by default), and `get_dataset`'s arguments passed in the
order its signature declares (the tutorial passes them shuffled). Run on 8 simulated CPU devices with:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/quickstart.py     (or: make demo)

The matmul's strategy ((2, 4), (4, 1)) is the user's hint; sharding propagation gives relu ((2, 4)) and matmul2
((2, 4), (4, 1)). IR dumps land in ir_dumps/rank_{r}/ (`graphpar ir summary ir_dumps/rank_0`).
"""

import os

# 8 simulated CPU devices unless the caller chose otherwise (must be set before JAX starts).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402

import graphpar as ms  # noqa: E402
import graphpar.dataset as ds  # noqa: E402
from graphpar import ops  # noqa: E402
from graphpar.common.initializer import initializer  # noqa: E402
from graphpar.common.parameter import Parameter  # noqa: E402
from graphpar.communication import get_rank, init  # noqa: E402
from graphpar.nn import Cell, Momentum, MSELoss  # noqa: E402
from graphpar.train import LossMonitor, Model  # noqa: E402


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

    def __init__(self, in_dim, hidden_dim, out_dim):
        super().__init__()
        self.in_dim = in_dim
        self.hidden_dim = hidden_dim
        self.out_dim = out_dim
        self.weight = Parameter(initializer("normal", [self.in_dim, self.hidden_dim]), "w")
        self.weight2 = Parameter(initializer("normal", [self.hidden_dim, self.out_dim]), "w2")
        # (2, 4): the input is split 2 ways on the batch and 4 ways on the width; (4, 1): the weight 4 ways on
        # its height. Every other op gets its strategy from sharding propagation.
        self.matmul = ops.MatMul().shard(((2, 4), (4, 1)))
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        out = self.matmul(x, self.weight)
        out = self.relu(out)
        out = self.matmul2(out, self.weight2)
        return out


def main():
    var_step_per_epoch = 4
    var_single_batch_size = 2
    var_in_dim = 32
    var_hidden_dim = 16
    var_out_dim = 16

    ms.set_context(mode=ms.GRAPH_MODE, device_target=os.environ.get("DEVICE_TARGET", "CPU"), save_graphs=2,
                   save_graphs_path=os.environ.get("SAVE_GRAPHS_PATH", "ir_dumps"))
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, search_mode="sharding_propagation",
                                 dataset_strategy="data_parallel")
    init()
    rank_id = get_rank()

    fake_dataset = get_dataset(var_single_batch_size, var_in_dim, var_out_dim, var_step_per_epoch)
    dataset = ds.GeneratorDataset(fake_dataset, ["input", "label"])

    net = Net(var_in_dim, var_hidden_dim, var_out_dim)
    loss = MSELoss()
    callback = [LossMonitor()]
    learning_rate = 0.2
    momentum = 0.1
    epoch_size = 5
    opt = Momentum(net.trainable_params(), learning_rate, momentum)

    model = Model(net, loss_fn=loss, optimizer=opt)
    model.train(epoch_size, dataset, callbacks=callback, dataset_sink_mode=False)
    if rank_id == 0:
        print(f"IR dumps: {os.path.abspath(ms.get_context('save_graphs_path'))}/rank_*/", flush=True)


if __name__ == "__main__":
    main()
