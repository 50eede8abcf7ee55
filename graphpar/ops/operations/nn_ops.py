"""``mindspore.ops.operations.nn_ops``: the neural-network primitives, re-exported from where graphpar defines
them."""

from graphpar.ops.attention_ops import FlashAttentionScore  # noqa: F401
from graphpar.ops.infer_attention_ops import IncreFlashAttention, PromptFlashAttention  # noqa: F401
from graphpar.ops.conv_transpose import Conv2DBackpropInput, Conv2DTranspose  # noqa: F401
from graphpar.ops.nn_ops import (  # noqa: F401
    AdaptiveAvgPool2D, AvgPool, BatchNorm, BiasAdd, Conv2D, Dropout, FastGeLU, GeLU, L2Normalize, LayerNorm,
    LogSoftmax, MaxPool, ReLU, ReLU6, SiLU, Softmax, SoftmaxCrossEntropyWithLogits,
    SparseSoftmaxCrossEntropyWithLogits)
from graphpar.ops.norm_act_ops import L2Loss, PReLU, RmsNorm, SigmoidCrossEntropyWithLogits  # noqa: F401
from graphpar.ops.pool3d_ops import AvgPool3D, Conv3D, MaxPool3D  # noqa: F401
from graphpar.ops.misc_ops import IOU, CheckValid, TopK  # noqa: F401
from graphpar.ops.resize_ops import CropAndResize, ResizeBilinearV2, ResizeNearestNeighbor  # noqa: F401
