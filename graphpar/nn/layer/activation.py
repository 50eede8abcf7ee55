"""MindSpore's ``mindspore.nn.layer.activation`` module path: the activation Cells and ``get_activation``."""

from graphpar.nn.layer.basic import (  # noqa: F401
    GELU, FastGelu, LogSoftmax, ReLU, ReLU6, Sigmoid, Softmax, Tanh, get_activation)
