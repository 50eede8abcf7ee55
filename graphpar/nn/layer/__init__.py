from graphpar.nn.layer.basic import (  # noqa: F401
    GELU, Dense, Dropout, FastGelu, Flatten, Identity, LogSoftmax, ReLU, ReLU6, Sigmoid, Softmax, Tanh, get_activation)
from graphpar.nn.layer.activation import PReLU  # noqa: F401
from graphpar.nn.layer.conv import Conv2d  # noqa: F401
from graphpar.nn.layer.normalization import BatchNorm1d, BatchNorm2d, LayerNorm, SyncBatchNorm  # noqa: F401
from graphpar.nn.layer.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: F401
