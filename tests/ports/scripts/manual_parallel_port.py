"""MindSpore's manual-parallel guide (manual_parallel/train.py), in our own words and small: no parallel mode
(STAND_ALONE), one device per process under ``msrun``; every rank reads the whole ``MNIST_Data/train/`` batch and
keeps its own slice in ``construct``, and the loss cell averages the ranks' losses with ``ops.AllReduce``, so every
rank reports the same loss. ``Model.train`` with ``LossMonitor``. Only the imports differ from MindSpore's.

    msrun --worker_num 8 --local_worker_num 8 --master_addr 127.0.0.1 --join True manual_parallel_port.py
"""

import os

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops, train
from graphpar.communication import get_group_size, get_rank, init

ms.set_context(mode=ms.GRAPH_MODE)
init()
cur_rank = get_rank()
batch_size = 32
device_num = get_group_size()
shard_size = batch_size // device_num


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.layer1 = nn.Dense(28 * 28, 64)
        self.relu1 = nn.ReLU()
        self.layer2 = nn.Dense(64, 10)

    def construct(self, x):
        x = x[cur_rank * shard_size:cur_rank * shard_size + shard_size]
        x = self.relu1(self.layer1(self.flatten(x)))
        return self.layer2(x)


class ReduceLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.loss = nn.CrossEntropyLoss()
        self.all_reduce = ops.AllReduce()

    def construct(self, data, label):
        label = label[cur_rank * shard_size:cur_rank * shard_size + shard_size]
        loss_value = self.loss(data, label)
        return self.all_reduce(loss_value) / device_num


def create_dataset():
    dataset = ds.MnistDataset(os.getenv("DATA_PATH"))
    dataset = dataset.map([ds.vision.Rescale(1.0 / 255.0, 0), ds.vision.Normalize(mean=(0.1307,), std=(0.3081,)),
                           ds.vision.HWC2CHW()], "image")
    dataset = dataset.map(ds.transforms.TypeCast(ms.int32), "label")
    return dataset.batch(batch_size)


net = Network()
optimizer = nn.SGD(net.trainable_params(), 0.1)
model = ms.Model(net, loss_fn=ReduceLoss(), optimizer=optimizer)
model.train(8, create_dataset(), callbacks=[train.LossMonitor(1)])
