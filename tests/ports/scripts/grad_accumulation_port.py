"""MindSpore 2.6's gradient-accumulation tutorial (distributed_gradient_accumulation), in our own words and small:
a Dense stack built under ``no_init_parameters()``, its loss cell wrapped in ``GradAccumulation(..., 4)`` (each
batch of 32 run as four micro-batches of 8, their gradients summed, one optimizer step per batch), the whole
wrapped in ``AutoParallel(net)`` with ``.hsdp()`` and trained with ``Model.train``. Only the imports differ from
MindSpore's. ``train(micro_size=None)`` trains the same network without the wrapper: the large-batch step the
accumulation must equal."""

import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, train as ms_train
from graphpar.communication import init
from graphpar.nn.utils import no_init_parameters
from graphpar.parallel.auto_parallel import AutoParallel
from graphpar.parallel.nn import GradAccumulation


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.dense_relu_sequential = nn.SequentialCell(
            nn.Dense(8 * 8, 64, weight_init="normal", bias_init="zeros"),
            nn.ReLU(),
            nn.Dense(64, 64, weight_init="normal", bias_init="zeros"),
            nn.ReLU(),
            nn.Dense(64, 10, weight_init="normal", bias_init="zeros"),
        )

    def construct(self, x):
        return self.dense_relu_sequential(self.flatten(x))


def create_dataset(batch_size):
    rng = np.random.default_rng(0)
    labels = np.arange(batch_size * 4) % 8
    images = rng.normal(0, 0.1, (batch_size * 4, 1, 8, 8)).astype(np.float32)
    images[np.arange(len(labels)), 0, labels, :] += 1.0

    def generate():
        for image, label in zip(images, labels.astype(np.int32)):
            yield image, label

    return ds.GeneratorDataset(generate, ["image", "label"], shuffle=False).batch(batch_size)


class Losses(ms_train.Callback):
    def __init__(self):
        self.values = []

    def step_end(self, run_context):
        loss = run_context.original_args().net_outputs
        self.values.append(float(loss.asnumpy()))
        print("step: %s, loss is %s" % (len(self.values), loss), file=sys.stderr)


def train(micro_size=4, lr=1e-2, epochs=3):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.reset_auto_parallel_context()
    init()
    ms.set_seed(1)
    with no_init_parameters():
        net = Network()
        optimizer = nn.SGD(net.trainable_params(), lr)
    loss_fn = nn.CrossEntropyLoss()
    network = nn.WithLossCell(net, loss_fn)
    if micro_size is not None:
        network = GradAccumulation(network, micro_size)
    network = AutoParallel(network)
    network.hsdp(threshold=0)  # this small network's weights are under the default 64 KB
    model = ms.Model(network, optimizer=optimizer)
    losses = Losses()
    model.train(epochs, create_dataset(32), callbacks=[losses], dataset_sink_mode=False)
    return losses.values, {p.name: p.asnumpy() for p in net.trainable_params()}


if __name__ == "__main__":
    print(train()[0])
