"""MindSpore's distributed save / load sample (scripts/rank_dirs_port.py: SEMI_AUTO on 8 devices, a
``ModelCheckpoint`` per rank, every rank's checkpoint loaded as a list with ``load_distributed_checkpoint``),
checked for the tutorial's claim: the reloaded network evaluates to the accuracy the trained one had.
(tests/checkpoint/test_rank_dirs.py checks the files, the values and the predict output under two plans.)"""

import numpy as np

import graphpar as ms
from graphpar import nn
from tests.ports.scripts.rank_dirs_port import create_dataset, load_and_predict, numpy_forward, train_saving


def test_reloaded_distributed_checkpoint_evaluates_to_the_trained_accuracy(tmp_path):
    values = train_saving(str(tmp_path))
    images, labels = zip(*((np.asarray(i), np.asarray(l)) for i, l in create_dataset(16).create_tuple_iterator()))
    trained = float(np.mean(numpy_forward(values, images[0]).argmax(axis=1) == labels[0]))
    net, _ = load_and_predict(str(tmp_path), predict_data=ms.Tensor(images[0][:1]))
    model = ms.Model(net, loss_fn=nn.CrossEntropyLoss(), metrics={"acc"})
    accuracy = model.eval(create_dataset(1), dataset_sink_mode=False)["acc"]
    assert accuracy == trained
    assert trained > 0.1  # two epochs on 16 images: above chance
