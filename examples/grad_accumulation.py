"""MindSpore's gradient accumulation tutorial (`model_accu.py` / `resnet50_distributed_training_grad_accu.py`),
ported to graphpar.

MindSpore's tutorial accumulates by hand: `TrainForwardBackward` adds each mini-batch's gradients into `grad_sum`
Parameters, `TrainOptim` applies the optimizer to `grad_sum` every `mini_steps` batches, `TrainClear` zeroes it, and a
`GradientAccumulation` driver runs that loop. That pattern is kept below as written (graphpar has no
`MultitypeFuncGraph`/`HyperMap`/`AssignAdd`; the per-Parameter loops and `set_data` do the same), and runs eagerly.

The compiled way is MindSpore 2.x's wrapper: `Model(GradAccumulation(WithLossCell(net, loss), micro_size),
optimizer=opt)` cuts each batch into `micro_size` micro-batches inside ONE compiled step (a scan that reduces the
gradients across devices once per step). Both are run here on the same data in DATA_PARALLEL over 8 simulated
devices, and end with the same parameters:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/grad_accumulation.py
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np  # noqa: E402

import graphpar as ms  # noqa: E402
import graphpar.dataset as ds  # noqa: E402
from graphpar import Parameter, ParameterTuple, nn, ops  # noqa: E402
from graphpar.communication import get_group_size, get_rank, init  # noqa: E402
from graphpar.nn import Cell  # noqa: E402
from graphpar.train import LossMonitor, Model  # noqa: E402


class TrainForwardBackward(Cell):
    """Loss and gradients of one mini-batch; the gradients are added into ``grad_sum``."""

    def __init__(self, network, optimizer, grad_sum, sens=1.0):
        super().__init__(auto_prefix=False)
        self.network = network
        self.weights = ParameterTuple(network.trainable_params())
        self.optimizer = optimizer
        self.grad_sum = grad_sum
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.sens = sens

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ops.Fill()(loss.dtype, loss.shape, self.sens)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        for acc, grad in zip(self.grad_sum, grads):
            acc.set_data(acc.get_value() + grad)
        return loss


class TrainOptim(Cell):
    def __init__(self, optimizer, grad_sum):
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.grad_sum = grad_sum

    def construct(self):
        return self.optimizer([g.get_value() for g in self.grad_sum])


class TrainClear(Cell):
    def __init__(self, grad_sum, zeros):
        super().__init__(auto_prefix=False)
        self.grad_sum = grad_sum
        self.zeros = zeros

    def construct(self):
        for acc, zero in zip(self.grad_sum, self.zeros):
            acc.set_data(zero.get_value())
        return True


class GradientAccumulation:
    """The tutorial's driver: forward/backward every batch, an optimizer step every ``mini_steps`` batches."""

    def __init__(self, network, loss_fn, optimizer):
        self._network = network
        self._loss_fn = loss_fn
        self._optimizer = optimizer
        params = self._optimizer.parameters
        # MindSpore: params.clone(prefix="grad_sum", init="zeros")
        self._grad_sum = [Parameter(np.zeros(p.shape, np.float32), name=f"grad_sum.{p.name}") for p in params]
        self._zeros = [Parameter(np.zeros(p.shape, np.float32), name=f"zeros.{p.name}") for p in params]
        self._train_forward_backward = TrainForwardBackward(nn.WithLossCell(network, loss_fn), optimizer,
                                                            self._grad_sum).set_train()
        self._train_optim = TrainOptim(self._optimizer, self._grad_sum).set_train()
        self._train_clear = TrainClear(self._grad_sum, self._zeros).set_train()

    def train_process(self, epoch, train_dataset, mini_steps=None):
        for i in range(epoch):
            step = 0
            for k, (x, y) in enumerate(train_dataset.create_tuple_iterator()):
                loss = self._train_forward_backward(x, y)
                if (k + 1) % mini_steps == 0:
                    step += 1
                    print("epoch:", i + 1, "step:", step, "loss is ", float(loss))
                    self._train_optim()
                    self._train_clear()


class Net(Cell):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.fc1 = nn.Dense(16, 64, weight_init=ms.Tensor(rng.normal(0, 0.25, (64, 16)).astype(np.float32)),
                            bias_init="zeros", activation="relu")
        self.fc2 = nn.Dense(64, 4, weight_init=ms.Tensor(rng.normal(0, 0.12, (4, 64)).astype(np.float32)),
                            bias_init="zeros")

    def construct(self, x):
        return self.fc2(self.fc1(x))


def dataset(batch_size, rows=128, sharded=False):
    """``rows`` rows in batches of ``batch_size``; ``sharded``: this rank's shard, as the tutorials'
    ``create_dataset`` reads it (``num_shards=get_group_size(), shard_id=get_rank()``)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(rows, 16)).astype(np.float32)
    y = rng.normal(size=(rows, 4)).astype(np.float32)

    shards = {"num_shards": get_group_size(), "shard_id": get_rank()} if sharded else {}
    return ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False, **shards).batch(batch_size)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    mini_steps, micro_batch = 4, 8

    # 1. the tutorial's hand-written loop: 4 mini-batches of 8 per optimizer step, gradients summed
    net = Net()
    loss = nn.MSELoss(reduction="sum")
    GradientAccumulation(net, loss, nn.Momentum(net.trainable_params(), 0.001, 0.9)).train_process(
        1, dataset(micro_batch), mini_steps=mini_steps)
    by_hand = {p.name: p.asnumpy() for p in net.get_parameters()}

    # 2. the compiled wrapper on the job's devices (8): each device loads its own shard in batches of 32 / 8 rows,
    #    as a MindSpore rank would, so one step trains on the same 32 rows as 4 hand-written mini-steps; each device
    #    cuts its rows into 4 micro-batches
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=False)
    net2 = Net()
    accumulated = nn.GradAccumulation(nn.WithLossCell(net2, loss), mini_steps)
    model = Model(accumulated, optimizer=nn.Momentum(net2.trainable_params(), 0.001, 0.9))
    model.train(1, dataset(micro_batch * mini_steps // get_group_size(), sharded=True), callbacks=[LossMonitor(1)])
    compiled = {p.name: p.asnumpy() for p in net2.get_parameters()}

    gap = max(float(np.max(np.abs(by_hand[k] - compiled[k]))) for k in by_hand)
    print(f"largest parameter difference between the two: {gap:.2e}")
    return gap


if __name__ == "__main__":
    main()
