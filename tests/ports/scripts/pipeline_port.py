"""MindSpore's pipeline-parallel tutorial (distributed_pipeline_parallel), in our own words and small: a MatMul
layer and two Dense layers, the first half of the network on stage 0 and the second on stage 1 by
``Cell.pipeline_stage``, ``pipeline_stages=2`` in SEMI_AUTO_PARALLEL, the loss cell wrapped in
``nn.PipelineCell(..., 4)`` (four micro-batches per step) and trained with ``Model.train``. Only the imports differ
from MindSpore's. graphpar drives the 8 ranks from one process: stage 0 on ranks 0-3, stage 1 on ranks 4-7.

The tutorial's own loop is functional (``value_and_grad`` of the PipelineCell, ``nn.PipelineGradReducer``,
``@ms.jit``): scripts/pipeline_functional_port.py; this is ``Model.train``, which MindSpore's earlier tutorial used.
"""

import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops, train
from graphpar.common.initializer import HeUniform, initializer
from graphpar.communication import init


class MatMulCell(nn.Cell):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.param = ms.Parameter(initializer(HeUniform(np.sqrt(5)), [in_channels, out_channels]), name="param")
        self.matmul = ops.MatMul()

    def construct(self, x):
        return self.matmul(x, self.param)


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.layer1 = MatMulCell(8 * 8, 64)
        self.relu1 = nn.ReLU()
        self.layer2 = nn.Dense(64, 64)
        self.relu2 = nn.ReLU()
        self.layer3 = nn.Dense(64, 10)

    def construct(self, x):
        x = self.flatten(x)
        x = self.relu1(self.layer1(x))
        x = self.relu2(self.layer2(x))
        return self.layer3(x)


def create_dataset(batch_size):
    """Images whose label is the row of their bright stripe, 4 batches."""
    rng = np.random.default_rng(0)
    labels = np.arange(batch_size * 4) % 8
    images = rng.normal(0, 0.1, (batch_size * 4, 1, 8, 8)).astype(np.float32)
    images[np.arange(len(labels)), 0, labels, :] += 1.0

    def generate():
        for image, label in zip(images, labels.astype(np.int32)):
            yield image, label

    return ds.GeneratorDataset(generate, ["image", "label"], shuffle=False).batch(batch_size)


class Losses(train.Callback):
    def __init__(self):
        self.values = []

    def step_end(self, run_context):
        loss = run_context.original_args().net_outputs
        self.values.append(float(loss.asnumpy()))
        print("step: %s, loss is %s" % (len(self.values), loss), file=sys.stderr)


def main(epochs=4):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, pipeline_stages=2)
    init()
    ms.set_seed(1)
    net = Network()
    net.layer1.pipeline_stage = 0
    net.relu1.pipeline_stage = 0
    net.layer2.pipeline_stage = 0
    net.relu2.pipeline_stage = 1
    net.layer3.pipeline_stage = 1
    optimizer = nn.SGD(net.trainable_params(), 1e-2)
    net_with_loss = nn.PipelineCell(nn.WithLossCell(net, nn.CrossEntropyLoss()), 4)
    model = ms.Model(net_with_loss, optimizer=optimizer)
    losses = Losses()
    model.train(epochs, create_dataset(32), callbacks=[losses], dataset_sink_mode=False)
    return losses.values, net


if __name__ == "__main__":
    print(main()[0])
