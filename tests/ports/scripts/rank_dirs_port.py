"""MindSpore's distributed save / load guide (model_saving_loading: train_saving.py, test_loading.py), in small:
SEMI_AUTO on 8 devices, a ModelCheckpoint per rank (``directory=".../rank_" + str(get_rank())``,
``integrated_save=False``), then every rank's checkpoint loaded as a list into a fresh network with
``load_distributed_checkpoint`` and a batch-1 ``predict``. Only the imports differ from MindSpore's."""

import os

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn, ops, train
from graphpar.common.initializer import initializer
from graphpar.communication import get_group_size, get_rank, init


class Dense(nn.Cell):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.weight = ms.Parameter(initializer("normal", [in_channels, out_channels], ms.float32))
        self.bias = ms.Parameter(initializer("normal", [out_channels], ms.float32))
        self.matmul = ops.MatMul()
        self.add = ops.Add()

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class Network(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = ops.Flatten()
        self.layer1 = Dense(8 * 8, 32)
        self.relu1 = ops.ReLU()
        self.layer2 = Dense(32, 32)
        self.relu2 = ops.ReLU()
        self.layer3 = Dense(32, 10)

    def construct(self, x):
        x = self.relu1(self.layer1(self.flatten(x)))
        x = self.relu2(self.layer2(x))
        return self.layer3(x)


def _setup():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    init()
    ms.set_seed(1)


def create_dataset(batch_size):
    rng = np.random.default_rng(0)
    images = rng.normal(size=(16, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, size=(16,)).astype(np.int32)
    dataset = ds.NumpySlicesDataset({"image": images, "label": labels}, shuffle=False)
    return dataset.batch(batch_size)


def train_saving(root, epochs=2):
    """train_saving.py: returns the trained parameters."""
    _setup()
    net = Network()
    net.layer1.matmul.shard(((2, 1), (1, 2)))
    net.layer3.matmul.shard(((2, 2), (2, 1)))
    optimizer = nn.SGD(net.trainable_params(), 1e-2)
    ckpt_config = train.CheckpointConfig(save_checkpoint_steps=8, keep_checkpoint_max=1, integrated_save=False)
    ckpoint_cb = train.ModelCheckpoint(prefix="checkpoint",
                                       directory=os.path.join(root, "src_checkpoints", "rank_{}".format(get_rank())),
                                       config=ckpt_config)
    model = ms.Model(net, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer)
    model.train(epochs, create_dataset(1), callbacks=[ckpoint_cb])
    return {p.name: p.asnumpy() for p in net.get_parameters()}


def load_and_predict(root, layer1_strategy=((2, 1), (1, 2)), predict_data=None):
    """test_loading.py: returns the loaded network and its predict output."""
    _setup()
    net = Network()
    net.layer1.matmul.shard(layer1_strategy)
    net.layer3.matmul.shard(((2, 2), (2, 1)))
    model = ms.Model(net)
    predict_layout = model.infer_predict_layout(predict_data)
    ckpt_file_list = [os.path.join(root, "src_checkpoints", "rank_{}".format(i), "checkpoint-2_16.ckpt")
                      for i in range(0, get_group_size())]
    ms.load_distributed_checkpoint(net, ckpt_file_list, predict_layout)
    return net, model.predict(predict_data)


def numpy_forward(values, x):
    """The network in numpy, from its parameter values: the stand-alone output the checks compare with."""
    h = np.maximum(x.reshape(len(x), -1) @ values["layer1.weight"] + values["layer1.bias"], 0)
    h = np.maximum(h @ values["layer2.weight"] + values["layer2.bias"], 0)
    return h @ values["layer3.weight"] + values["layer3.bias"]
