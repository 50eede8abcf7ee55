"""MindSpore's pipeline-parallel tutorial (distributed_pipeline_parallel) with its functional training loop, in our
own words and small, imports changed only: ``ms.value_and_grad`` of a ``forward_fn`` that returns the
``PipelineCell``'s loss, ``nn.PipelineGradReducer`` on the gradients, ``optimizer(grads)``, the step returning
``loss, grads``. The network's first half runs on stage 0 and its second half on stage 1; four micro-batches per
step; layer1's MatMul split over a stage's four devices.

``train(style)`` trains a fresh network for each style and returns ``(losses, net, the last step's grads)``:

* ``"jit"``: the tutorial's sample code: ``set_auto_parallel_context(parallel_mode=SEMI_AUTO_PARALLEL,
  pipeline_stages=2)``, ``Cell.pipeline_stage`` on each layer, ``nn.PipelineCell``, ``nn.PipelineGradReducer`` and a
  ``@ms.jit`` step;
* ``"auto_parallel"``: the tutorial's text (MindSpore 2.6): the network and optimizer made under
  ``no_init_parameters()``, ``parallel.nn.Pipeline(..., stage_config=...)``, ``parallel.nn.PipelineGradReducer(...,
  opt_shard=False)``, the step wrapped as ``AutoParallel(train_one_step, parallel_mode="semi_auto")`` with
  ``.pipeline(stages=2, scheduler=...)`` and no parallel context;
* ``"model"``: the same ``PipelineCell`` network trained by ``Model.train``'s step (the tutorial's closing advice),
  a ``TrainOneStepCell`` given the same batches.
"""

import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops
from graphpar.common.initializer import HeUniform, initializer
from graphpar.communication import init
from graphpar.nn.utils import no_init_parameters
from graphpar.parallel.auto_parallel import AutoParallel
from graphpar.parallel.nn import Pipeline, PipelineGradReducer

STAGES = {"_backbone.flatten": 0, "_backbone.layer1": 0, "_backbone.relu1": 0, "_backbone.layer2": 1,
          "_backbone.relu2": 1, "_backbone.layer3": 1}


class MatMulCell(nn.Cell):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.param = ms.Parameter(initializer(HeUniform(np.sqrt(5)), [in_channels, out_channels]), name="param")
        self.matmul = ops.MatMul().shard(((1, 4), (4, 1)))

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


def create_dataset(batch_size, samples=128):
    """Images whose label is the row of their bright stripe."""
    rng = np.random.default_rng(0)
    labels = np.arange(samples) % 8
    images = rng.normal(0, 0.1, (samples, 1, 8, 8)).astype(np.float32)
    images[np.arange(len(labels)), 0, labels, :] += 1.0

    def generate():
        for image, label in zip(images, labels.astype(np.int32)):
            yield image, label

    return ds.GeneratorDataset(generate, ["image", "label"], shuffle=False).batch(batch_size)


def _jit_sample():
    """The sample code's step: the parallel settings in the context, @ms.jit."""
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, pipeline_stages=2)
    net = Network()
    net.layer1.pipeline_stage = 0
    net.relu1.pipeline_stage = 0
    net.layer2.pipeline_stage = 1
    net.relu2.pipeline_stage = 1
    net.layer3.pipeline_stage = 1
    optimizer = nn.SGD(net.trainable_params(), 1e-2)
    net_with_loss = nn.PipelineCell(nn.WithLossCell(net, nn.CrossEntropyLoss()), 4)
    net_with_loss.set_train()

    def forward_fn(inputs, target):
        loss = net_with_loss(inputs, target)
        return loss

    grad_fn = ops.value_and_grad(forward_fn, None, optimizer.parameters)
    pp_grad_reducer = nn.PipelineGradReducer(optimizer.parameters)

    @ms.jit
    def train_one_step(inputs, target):
        loss, grads = grad_fn(inputs, target)
        grads = pp_grad_reducer(grads)
        optimizer(grads)
        return loss, grads

    return net, train_one_step


def _auto_parallel_sample(scheduler):
    """The tutorial text's step: no_init_parameters, Pipeline(stage_config=...), AutoParallel(...).pipeline()."""
    with no_init_parameters():
        net = Network()
        optimizer = nn.SGD(net.trainable_params(), 1e-2)
        pp_grad_reducer = PipelineGradReducer(optimizer.parameters, opt_shard=False)

    net_with_loss = Pipeline(nn.WithLossCell(net, nn.CrossEntropyLoss()), 4, stage_config=STAGES)
    net_with_loss.set_train()

    def forward_fn(inputs, target):
        loss = net_with_loss(inputs, target)
        return loss

    grad_fn = ops.value_and_grad(forward_fn, None, optimizer.parameters)

    @ms.jit
    def train_one_step(inputs, target):
        loss, grads = grad_fn(inputs, target)
        grads = pp_grad_reducer(grads)
        optimizer(grads)
        return loss, grads

    parallel_net = AutoParallel(train_one_step, parallel_mode="semi_auto")
    parallel_net.pipeline(stages=2, scheduler=scheduler)
    return net, parallel_net


def _train_one_step_cell(data_set, epochs):
    """Model.train's step: the same PipelineCell network in a TrainOneStepCell, given the same batches."""
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, pipeline_stages=2)
    net = Network()
    optimizer = nn.SGD(net.trainable_params(), 1e-2)
    net_with_loss = nn.PipelineCell(nn.WithLossCell(net, nn.CrossEntropyLoss()), 4, stage_config=STAGES)
    train_net = nn.TrainOneStepCell(net_with_loss, optimizer)
    return [float(train_net(data, label)) for _ in range(epochs) for data, label in data_set], net, None


def train(style, epochs=2, scheduler="1f1b"):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.reset_auto_parallel_context()
    init()
    ms.set_seed(1)
    data_set = create_dataset(32)
    if style == "model":
        return _train_one_step_cell(data_set, epochs)
    net, parallel_net = _jit_sample() if style == "jit" else _auto_parallel_sample(scheduler)
    values, grads = [], None
    for epoch in range(epochs):
        i = 0
        for data, label in data_set:
            loss, grads = parallel_net(data, label)
            values.append(float(loss))
            if i % 2 == 0:
                print("epoch: %s, step: %s, loss is %s" % (epoch, i, loss), file=sys.stderr)
            i += 1
    return values, net, grads


if __name__ == "__main__":
    print(train(sys.argv[1] if len(sys.argv) > 1 else "jit")[0])
