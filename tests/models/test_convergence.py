"""Slow: a narrow ResNet-50 learns the generated CIFAR-like set (examples/make_cifar_like.py) through the tutorials'
pipeline, loss and optimizer, in DATA_PARALLEL on the 8 devices."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.communication import get_group_size, get_rank
from graphpar.dataset import transforms, vision
from graphpar.models import SoftmaxCrossEntropyExpand, resnet50
from graphpar.train import Callback, Model
from graphpar.train.callback._callback import loss_value

ROOT = Path(__file__).resolve().parents[2]


def _make_cifar_like():
    spec = importlib.util.spec_from_file_location("make_cifar_like", ROOT / "examples" / "make_cifar_like.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Losses(Callback):
    def __init__(self):
        self.values = []

    def on_train_step_end(self, run_context):
        self.values.append(float(loss_value(run_context.original_args().net_outputs)))


def _dataset(folder, batch_size):
    """The tutorials' create_dataset at 32×32."""
    data = ds.Cifar10Dataset(str(folder), usage="train", num_shards=get_group_size(), shard_id=get_rank())
    data = data.map(operations=transforms.TypeCast(ms.int32), input_columns="label")
    data = data.map(operations=[vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip(),
                                vision.Rescale(1.0 / 255.0, 0.0),
                                vision.Normalize((0.4465, 0.4822, 0.4914), (0.2010, 0.1994, 0.2023)),
                                vision.HWC2CHW()], input_columns="image")
    return data.shuffle(buffer_size=10).batch(batch_size, drop_remainder=True)


@pytest.mark.slow
def test_narrow_resnet50_reduces_the_loss_by_30_percent(tmp_path):
    folder = _make_cifar_like().write(tmp_path, train=2560, test=10)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(0)
    net = resnet50(class_num=10, width=0.25)
    opt = nn.Momentum(filter(lambda p: p.requires_grad, net.get_parameters()), 0.05, 0.9)
    model = Model(net, loss_fn=SoftmaxCrossEntropyExpand(sparse=True), optimizer=opt)
    losses = Losses()
    model.train(4, _dataset(folder, 8), callbacks=[losses])  # 4 epochs of 40 steps, global batch 64
    first, last = np.mean(losses.values[:10]), np.mean(losses.values[-10:])
    assert np.all(np.isfinite(losses.values))
    print(f"narrow ResNet-50: mean loss of the first 10 steps {first:.3f}, of the last 10 {last:.3f}")
    assert last <= 0.7 * first, (first, last, losses.values)
