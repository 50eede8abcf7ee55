from graphpar.nn.layer.basic import (  # noqa: F401
    GELU, Dense, Dropout, Flatten, Identity, LogSoftmax, ReLU, ReLU6, Sigmoid, Softmax, Tanh, get_activation)
