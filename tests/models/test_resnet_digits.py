"""graphpar.models.resnet18 (built as MindSpore's model-zoo ResNet) on real images in CIFAR-10's binary format.

The images are scikit-learn's handwritten digits (1797 real 8×8 scans, 10 classes), upscaled to 32×32×3 and written
record by record in CIFAR-10's binary layout, then read back with ``graphpar.dataset.Cifar10Dataset``. Trained
DATA_PARALLEL on the 8 devices, the network must evaluate well in evaluation mode (moving statistics), not only
train: with the docs sample's BatchNorm initialisation (momentum 0.99, tiny gamma) short runs evaluate at chance.
"""

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.dataset import transforms, vision
from graphpar.models import resnet18
from graphpar.train import Model

from tests.dataset.dsfiles import write_cifar10_bin

N_TRAIN = 1536


@pytest.fixture(scope="module")
def digits_cifar(tmp_path_factory):
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0 * 255.0).round().astype(np.uint8)  # (1797, 8, 8), ink 0..16
    images = np.kron(images, np.ones((1, 4, 4), np.uint8))  # 32×32, each pixel a 4×4 block
    images = np.repeat(images[..., None], 3, axis=-1)  # HWC, grey in R, G and B
    order = np.random.default_rng(0).permutation(len(images))
    images, labels = images[order], digits.target[order].astype(np.uint8)
    return write_cifar10_bin(tmp_path_factory.mktemp("digits"), {
        "data_batch_1.bin": (images[:N_TRAIN], labels[:N_TRAIN]),
        "test_batch.bin": (images[N_TRAIN:], labels[N_TRAIN:])})


def _dataset(folder, usage, batch_per_device):
    data = ds.Cifar10Dataset(str(folder), usage=usage, shuffle=usage == "train")
    data = data.map(operations=transforms.TypeCast(ms.int32), input_columns="label")
    data = data.map(operations=[vision.Rescale(1.0 / 255.0, 0.0), vision.Normalize((0.3, 0.3, 0.3), (0.4, 0.4, 0.4)),
                                vision.HWC2CHW()], input_columns="image")
    return data.batch(batch_per_device, drop_remainder=True)


def _model(width):
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    ms.set_seed(0)
    net = resnet18(class_num=10, width=width)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, Model(net, loss, nn.Momentum(net.trainable_params(), 0.05, 0.9), metrics={"acc"})


def test_eval_mode_predictions_are_not_constant_after_a_few_steps(digits_cifar):
    ds.config.set_seed(0)  # the shuffle order is this test's, whatever an earlier test set
    net, model = _model(width=0.125)
    data = _dataset(digits_cifar, "train", 8)
    model.train(1, data.take(64))  # 8 steps of 8 devices x 8 images
    batch = next(iter(_dataset(digits_cifar, "test", 64).create_tuple_iterator()))
    net.set_train(False)
    logits = np.asarray(net(batch[0]))
    # evaluation mode (moving statistics) still tells the samples apart
    assert len(set(np.argmax(logits, axis=1))) >= 3, np.argmax(logits, axis=1)
    assert float(np.std(logits, axis=0).mean()) > 0.1 * float(np.abs(logits).mean())


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="measured below 90 % at full width: 0.8555 after train(3) (13.5 min on 2 "
                   "cores); the same recipe trained one epoch per call with an eval after each gave 0.76 / 0.90 / "
                   "0.93; a per-step cosine decay of the learning rate gave 0.51. Half width reaches >= 90 %. "
                   "Cause not found (issue 11 open)")
@pytest.mark.timeout(3600)  # full width: several minutes on a busy 2-core machine, over the suite's 600 s default
def test_resnet18_reaches_90_percent_on_digits_in_3_epochs(digits_cifar):
    ds.config.set_seed(0)  # the shuffle order is this test's, whatever an earlier test set
    net, model = _model(width=1.0)  # the real graphpar.models.resnet18, every channel
    assert sum(p.asnumpy().size for p in net.trainable_params()) > 11_000_000
    model.train(3, _dataset(digits_cifar, "train", 8))
    acc = model.eval(_dataset(digits_cifar, "test", 8))["acc"]
    print(f"ResNet-18 (full width) on digits in CIFAR-10 format, 3 epochs DATA_PARALLEL: eval accuracy {acc:.4f}")
    assert acc >= 0.90, acc
