"""A MindSpore 2.x data-parallel training loop in the style of the documentation's samples, with the imports
changed only (the body is a function, run once per mode): MNIST from ``MNIST_Data/train/`` (the train pair alone),
``ms.value_and_grad(..., has_aux=True)``, ``nn.DistributedGradReducer``, ``optimizer(grads)``,
``amp.DynamicLossScaler`` and ``amp.all_finite``, the loss read with ``.asnumpy()``. Prints one JSON line per run:
the losses and the final scale."""

import json
import os
import sys

import graphpar as ms
import graphpar.dataset as ds
from graphpar import amp, nn
from graphpar.communication import init


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.layers = nn.SequentialCell(nn.Dense(28 * 28, 64, weight_init="normal", bias_init="zeros"), nn.ReLU(),
                                        nn.Dense(64, 10, weight_init="normal", bias_init="zeros"))

    def construct(self, x):
        return self.layers(self.flatten(x))


def create_dataset(batch_size):
    dataset = ds.MnistDataset(os.getenv("DATA_PATH"), shuffle=False)
    dataset = dataset.map([ds.vision.Rescale(1.0 / 255.0, 0), ds.vision.Normalize(mean=(0.1307,), std=(0.3081,)),
                           ds.vision.HWC2CHW()], "image")
    dataset = dataset.map(ds.transforms.TypeCast(ms.int32), "label")
    return dataset.batch(batch_size)


def main(mode, scaled):
    """The sample's script body, run once per parallel mode (with or without loss scaling)."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    init()
    ms.set_seed(1)
    net = Network()
    data_set = create_dataset(16)
    optimizer = nn.SGD(net.trainable_params(), 0.2)
    loss_fn = nn.CrossEntropyLoss()
    loss_scaler = amp.DynamicLossScaler(scale_value=2**10, scale_factor=2, scale_window=4)

    def forward_fn(data, target):
        logits = net(data)
        loss = loss_fn(logits, target)
        return (loss_scaler.scale(loss) if scaled else loss), logits

    grad_fn = ms.value_and_grad(forward_fn, None, net.trainable_params(), has_aux=True)
    grad_reducer = nn.DistributedGradReducer(optimizer.parameters)

    losses = []
    for epoch in range(3):
        for image, label in data_set:
            (loss_value, _), grads = grad_fn(image, label)
            grads = grad_reducer(grads)
            if scaled:
                loss_value, grads = loss_scaler.unscale(loss_value), loss_scaler.unscale(grads)
                is_finite = amp.all_finite(grads)
                if is_finite:
                    optimizer(grads)
                loss_scaler.adjust(is_finite)
            else:
                optimizer(grads)
            losses.append(float(loss_value.asnumpy()))
    print(json.dumps({"mode": mode, "scaled": scaled, "losses": losses,
                      "scale": float(loss_scaler.scale_value.asnumpy())}))


for run in sys.argv[1:]:  # e.g. stand_alone data_parallel data_parallel:scaled
    main(run.split(":")[0], run.endswith(":scaled"))
