"""MindSpore 2.x's mixed-precision training with the functional loop, as a MindSpore user writes it (the docs'
mixed-precision tutorial, in our own words), with only the imports changed: the network cast by
``amp.auto_mixed_precision(net, "O2", dtype=ms.float16)``, the loss scaled by an ``amp.DynamicLossScaler``, the
gradients unscaled and checked with ``amp.all_finite``, and the update skipped (``if is_finite:``) on a step whose
gradients overflow, inside a ``@ms.jit`` step. Each mode named on the command line trains a fresh network on this
process's devices and prints one JSON line: its losses and the loss scale after each step.

    python mixed_precision_port.py MODE ...

MODE: ``stand_alone``, ``data_parallel`` or ``semi_auto`` (set_auto_parallel_context's parallel modes).
"""

import json
import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import amp, nn
from graphpar.communication import init


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.dense_relu_sequential = nn.SequentialCell(
            nn.Dense(8 * 8, 128),
            nn.ReLU(),
            nn.Dense(128, 128),
            nn.ReLU(),
            nn.Dense(128, 10),
        )

    def construct(self, x):
        x = self.flatten(x)
        logits = self.dense_relu_sequential(x)
        return logits


def create_dataset(batch_size):
    rng = np.random.default_rng(0)
    images = rng.normal(size=(batch_size * 6, 8, 8)).astype(np.float32)
    labels = (images.reshape(len(images), -1)[:, :10].argmax(axis=1)).astype(np.int32)

    def generate():
        for image, label in zip(images, labels):
            yield image, label

    return ds.GeneratorDataset(generate, ["image", "label"], shuffle=False).batch(batch_size)


def train(mode):
    ms.reset_auto_parallel_context()
    if mode == "data_parallel":
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    elif mode == "semi_auto":
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    ms.set_seed(1)
    model = Network()
    model = amp.auto_mixed_precision(model, "O2", dtype=ms.float16)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = nn.SGD(model.trainable_params(), 0.5)
    loss_scaler = amp.DynamicLossScaler(scale_value=2**20, scale_factor=2, scale_window=5)

    def forward_fn(data, label):
        logits = model(data)
        loss = loss_fn(logits, label)
        loss = loss_scaler.scale(loss)
        return loss, logits

    grad_fn = ms.value_and_grad(forward_fn, None, model.trainable_params(), has_aux=True)

    @ms.jit
    def train_step(data, label):
        (loss, _), grads = grad_fn(data, label)
        loss = loss_scaler.unscale(loss)
        grads = loss_scaler.unscale(grads)
        is_finite = amp.all_finite(grads)
        if is_finite:
            optimizer(grads)
        loss_scaler.adjust(is_finite)
        return loss

    dataset = create_dataset(32)
    losses, scales = [], []
    for epoch in range(2):
        for step, (data, label) in enumerate(dataset.create_tuple_iterator()):
            loss = train_step(data, label)
            losses.append(float(loss))
            scales.append(float(loss_scaler.scale_value.asnumpy()))
            print(f"epoch: {epoch}, step: {step}, loss: {loss}, scale: {scales[-1]}", file=sys.stderr)
    return losses, scales


if __name__ == "__main__":
    init()
    for mode in sys.argv[1:]:
        losses, scales = train(mode)
        print(json.dumps({"mode": mode, "losses": losses, "scales": scales}))
