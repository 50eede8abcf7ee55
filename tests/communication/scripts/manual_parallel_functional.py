"""MindSpore-style manual parallel (STAND_ALONE, one device per process) written with MindSpore 2.x's functional
loop, then evaluated and run for inference, used by tests/communication/test_manual_parallel_eval.py (not a test
itself).

The network is ``manual_parallel_train.ManualNet`` (each rank's own slice of ``w1``/``w2``, ``AllReduce`` and
``AllGather`` in ``construct``). Each rank trains with ``@ms.jit`` on ``value_and_grad`` + ``optimizer(grads)``
(printing ``LOSS <rank> <step> <loss>``), then prints ``JIT <rank> <json>`` (an ``@ms.jit`` forward of the first
batch), ``PREDICT <rank> <json>`` (``Model.predict`` of it), ``EVAL <rank> <loss>`` (``Model.eval`` with the Loss
metric over the dataset) and ``PARAM <rank> <name> <json>``.
Usage: manual_parallel_functional.py [EPOCHS]
"""

import json
import sys

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.communication import get_group_size, get_rank, init
from graphpar.train import Model

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from manual_parallel_train import LR, MOMENTUM, Arrays, ManualNet, data  # noqa: E402

if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    rank = get_rank()
    x, y = data()
    net = ManualNet(rank, get_group_size())
    loss_fn = nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), LR, MOMENTUM)

    def forward_fn(inputs, labels):
        return loss_fn(net(inputs), labels)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

    @ms.jit
    def train_step(inputs, labels):
        loss, grads = grad_fn(inputs, labels)
        optimizer(grads)
        return loss

    @ms.jit
    def infer(inputs):
        return net(inputs)

    step = 0
    for _ in range(epochs):
        for i in range(len(x) // 4):
            step += 1
            loss = train_step(ms.Tensor(x[i * 4:(i + 1) * 4]), ms.Tensor(y[i * 4:(i + 1) * 4]))
            print(f"LOSS {rank} {step} {float(loss):.9g}", flush=True)
    print(f"JIT {rank} {json.dumps(np.asarray(infer(ms.Tensor(x[:4]))).reshape(-1).tolist())}", flush=True)
    model = Model(net, loss_fn, metrics={"loss"})
    print(f"PREDICT {rank} {json.dumps(np.asarray(model.predict(ms.Tensor(x[:4]))).reshape(-1).tolist())}",
          flush=True)
    print(f"EVAL {rank} {model.eval(Arrays(x, y, batch=4))['loss']:.9g}", flush=True)
    for p in net.trainable_params():
        print(f"PARAM {rank} {p.name} {json.dumps(p.asnumpy().reshape(-1).tolist())}", flush=True)
