"""MindSpore 2.x's functional training loop with operator-level parallelism, as a MindSpore user writes it (the
docs' operator-parallel / sharding-propagation samples, in our own words), with only the imports changed: a
``forward_fn`` differentiated by ``ms.value_and_grad``, a ``@ms.jit`` ``train_step`` that applies the optimizer, and
a loop over ``dataset.create_tuple_iterator()``. Each mode named on the command line trains a fresh network in this
process's device count and prints one JSON line: its losses.

    python functional_step_port.py DUMP_DIR MODE ...

MODE: ``semi_auto`` (set_auto_parallel_context), ``sharding_propagation`` (AUTO_PARALLEL, only layer1's MatMul
hinted), ``auto_parallel_wrapper`` (MindSpore 2.6's ``AutoParallel(train_step, parallel_mode="semi_auto")``, no
parallel context), ``auto_parallel_hsdp`` (the same wrapper with ``.hsdp()``: optimizer parallel, the weights and
their optimizer state sharded over the data-parallel devices).
"""

import json
import os
import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops
from graphpar.common.initializer import initializer
from graphpar.communication import init
from graphpar.parallel.auto_parallel import AutoParallel


class Dense(nn.Cell):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.weight = ms.Parameter(initializer("normal", [in_channels, out_channels], ms.float32))
        self.bias = ms.Parameter(initializer("zeros", [out_channels], ms.float32))
        self.matmul = ops.MatMul()
        self.add = ops.Add()

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = ops.Flatten()
        self.layer1 = Dense(64, 128)
        self.relu1 = ops.ReLU()
        self.layer2 = Dense(128, 128)
        self.relu2 = ops.ReLU()
        self.layer3 = Dense(128, 10)

    def construct(self, x):
        x = self.flatten(x)
        x = self.relu1(self.layer1(x))
        x = self.relu2(self.layer2(x))
        return self.layer3(x)


def create_dataset(batch_size):
    rng = np.random.default_rng(0)
    images = rng.normal(size=(batch_size * 4, 8, 8)).astype(np.float32)
    labels = (images.reshape(len(images), -1)[:, :10].argmax(axis=1)).astype(np.int32)

    def generate():
        for image, label in zip(images, labels):
            yield image, label

    return ds.GeneratorDataset(generate, ["image", "label"], shuffle=False).batch(batch_size)


def train(mode):
    ms.reset_auto_parallel_context()
    if mode == "semi_auto":
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    elif mode == "sharding_propagation":
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, search_mode="sharding_propagation")
    ms.set_seed(1)
    net = Network()
    net.layer1.matmul.shard(((2, 4), (4, 1)))
    if mode != "sharding_propagation":
        net.relu1.shard(((4, 1),))
        net.layer2.matmul.shard(((1, 2), (2, 4)))
    optimizer = nn.SGD(net.trainable_params(), 1.0)
    loss_fn = nn.CrossEntropyLoss()

    def forward_fn(data, target):
        logits = net(data)
        loss = loss_fn(logits, target)
        return loss, logits

    grad_fn = ms.value_and_grad(forward_fn, None, net.trainable_params(), has_aux=True)

    @ms.jit
    def train_step(inputs, targets):
        (loss_value, _), grads = grad_fn(inputs, targets)
        optimizer(grads)
        return loss_value

    step = train_step
    if mode in ("auto_parallel_wrapper", "auto_parallel_hsdp"):
        step = AutoParallel(train_step, parallel_mode="semi_auto")
    if mode == "auto_parallel_hsdp":
        step.hsdp(threshold=0)  # this small network's weights are under the default 64 KB
    dataset = create_dataset(32)
    losses = []
    for epoch in range(4):
        for i, (image, label) in enumerate(dataset.create_tuple_iterator()):
            loss = step(image, label)
            losses.append(float(loss))
            print("epoch: %s, step: %s, loss is %s" % (epoch, i, loss), file=sys.stderr)
    return losses


if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE)
    init()
    dump_root = sys.argv[1]
    for mode in sys.argv[2:]:
        ms.set_context(save_graphs=True, save_graphs_path=os.path.join(dump_root, mode))
        print(json.dumps({"mode": mode, "losses": train(mode)}))
