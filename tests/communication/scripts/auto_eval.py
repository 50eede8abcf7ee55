"""Multi-process Model.train + Model.eval + Model.predict in AUTO_PARALLEL (used by test_multiprocess; not a test).

Prints ``EVAL <loss>`` and ``PREDICT <sum>`` from the process holding rank 0.
"""

import numpy as np

import graphpar as ms
from graphpar.compile.plans.global_batch import to_host
from graphpar import nn, ops
from graphpar.communication import get_rank, init
from graphpar.train import Model

from dp_train import ShardedArrays  # noqa: E402  (same folder)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.fc1 = nn.Dense(8, 16, weight_init=ms.Tensor(rng.normal(size=(16, 8)).astype(np.float32) * 0.3))
        self.fc1.matmul.shard(((2, 1), (2, 1)))
        self.relu = ops.ReLU()
        self.fc2 = nn.Dense(16, 4, weight_init=ms.Tensor(rng.normal(size=(4, 16)).astype(np.float32) * 0.3))

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_seed(0)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = rng.normal(size=(64, 4)).astype(np.float32)
    net = Net()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics={"loss", "mae"})
    model.train(2, ShardedArrays(x, y, batch=2, num_shards=ms.communication.get_group_size(), shard_id=get_rank()))
    result = model.eval(ShardedArrays(x, y, batch=2, num_shards=ms.communication.get_group_size(),
                                      shard_id=get_rank()))
    out = np.asarray(to_host(model.predict(x[:8])))
    if get_rank() == 0:
        print(f"EVAL {result['loss']:.7g} {result['mae']:.7g}", flush=True)
        # predict's input is the rank's batch (every local rank gets it): each process gets its first rank's 8 rows
        print(f"PREDICT {out.shape[0]} {float(out.mean()):.6g}", flush=True)
