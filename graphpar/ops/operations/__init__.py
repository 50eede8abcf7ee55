"""Every primitive class (``from graphpar.ops import operations as P``, as MindSpore scripts write).

A package, as MindSpore's ``mindspore.ops.operations``: its submodules ``array_ops``, ``math_ops``, ``nn_ops``,
``comm_ops``, ``_inner_ops`` and ``_sequence_ops`` re-export the classes MindSpore files there, so ``from
mindspore.ops.operations.comm_ops import AllReduce`` ports by changing the package name only.
"""

from graphpar.ops.array_ops import (  # noqa: F401
    Cast, Concat, DType, Depend, ExpandDims, Fill, Flatten, Gather, GatherV2, OneHot, Pad, Reshape, Select, Shape, Slice,
    Split, Squeeze, Stack, StridedSlice, TensorToScalar, Tile, Transpose)
from graphpar.ops.attention_ops import FlashAttentionScore  # noqa: F401
from graphpar.ops.infer_attention_ops import IncreFlashAttention, PromptFlashAttention  # noqa: F401
from graphpar.ops.binary_ops import (  # noqa: F401
    Atan2, BitwiseAnd, BitwiseOr, BitwiseXor, DivNoNan, MaskedFill, Mod, MulNoNan, TruncateDiv, TruncateMod, Xdivy,
    Xlogy)
from graphpar.ops.comm_ops import (  # noqa: F401
    AllGather, AllReduce, AlltoAll, Broadcast, ReduceOp, ReduceScatter)
from graphpar.ops.conv_transpose import Conv2DBackpropInput, Conv2DTranspose  # noqa: F401
from graphpar.ops.debug_ops import Print  # noqa: F401
from graphpar.ops.index_ops import (  # noqa: F401
    BroadcastTo, EmbeddingLookup, GatherD, GatherNd, InplaceAdd, InplaceSub, InplaceUpdate, SparseGatherV2,
    TensorScatterUpdate)
from graphpar.ops.math_ops import (  # noqa: F401
    Abs, Add, AddN, Argmax, Argmin, ArgMaxWithValue, BatchMatMul, Ceil, Cos, CumSum, Div, Equal, Erf, Exp, Floor,
    FloorDiv, FloorMod, Greater, GreaterEqual, Identity, Less, LessEqual, Log, LogicalAnd, LogicalNot, LogicalOr,
    MatMul, Maximum, Minimum, Mul, Neg, NotEqual, OnesLike, Pow, RealDiv, Reciprocal, ReduceAll, ReduceAny,
    ReduceMax, ReduceMean, ReduceMin, ReduceProd, ReduceSum, Rsqrt, Sigmoid, Sign, Sin, Sqrt, Square,
    SquaredDifference, StopGradient, Sub, Tanh, TensorAdd, ZerosLike)
from graphpar.ops.nn_ops import (  # noqa: F401
    AdaptiveAvgPool2D, AvgPool, BatchNorm, BiasAdd, Conv2D, Dropout, FastGeLU, GeLU, L2Normalize, LayerNorm,
    LogSoftmax, MaxPool, ReLU, ReLU6, SiLU, Softmax, SoftmaxCrossEntropyWithLogits,
    SparseSoftmaxCrossEntropyWithLogits, SyncBatchNorm)
from graphpar.ops.misc_ops import IOU, ArgMinWithValue, Cdist, CheckValid, GetNext, SplitV, TopK  # noqa: F401
from graphpar.ops.norm_act_ops import L2Loss, Lerp, PReLU, RmsNorm, SigmoidCrossEntropyWithLogits  # noqa: F401
from graphpar.ops.operations import _inner_ops as _inner_ops
from graphpar.ops.operations import _sequence_ops as _sequence_ops
from graphpar.ops.operations import array_ops as array_ops
from graphpar.ops.operations import comm_ops as comm_ops
from graphpar.ops.operations import math_ops as math_ops
from graphpar.ops.operations import nn_ops as nn_ops
from graphpar.ops.pad_ops import PadV3  # noqa: F401
from graphpar.ops.pool3d_ops import AvgPool3D, Conv3D, MaxPool3D  # noqa: F401
from graphpar.ops.primitive import Primitive  # noqa: F401
from graphpar.ops.resize_ops import CropAndResize, ResizeBilinearV2, ResizeNearestNeighbor  # noqa: F401
from graphpar.ops.segment_ops import (  # noqa: F401
    UnsortedSegmentMax, UnsortedSegmentMin, UnsortedSegmentProd, UnsortedSegmentSum)

from graphpar.ops.fft_ops import (  # noqa: F401
    DCT, DCTN, FFT, FFT2, FFTN, HFFT, HFFT2, HFFTN, IDCT, IDCTN, IFFT, IFFT2, IFFTN, IHFFT, IHFFT2, IHFFTN, IRFFT,
    IRFFT2, IRFFTN, RFFT, RFFT2, RFFTN, FFTShift, IFFTShift)
from graphpar.ops.selection_ops import SplitTensor, SplitWithSize, TopkExt  # noqa: F401
from graphpar.ops.detection_ops import BoundingBoxEncode  # noqa: F401
from graphpar.ops.linalg_ops import LstsqV2, SolveTriangular, TraceV2  # noqa: F401
from graphpar.ops.math_extra_ops import (  # noqa: F401
    ApproximateEqual, Cholesky, Cummax, Cummin, CumProd, Elu, Eye, FillV2, HShrink, Invert, Lgamma, LpNorm,
    PopulationCount, ReverseV2, SquareSumAll, Trunc, Tril)
from graphpar.ops.random_extra_ops import (  # noqa: F401
    DropoutDoMask, DropoutGenMask, Gamma, RandomChoiceWithMask, UniformCandidateSampler, UniformReal)
from graphpar.ops.image_ops import GridSampler2D  # noqa: F401
from graphpar.ops.roi_align_ops import ROIAlign  # noqa: F401
from graphpar.ops.scatter_ops import (  # noqa: F401
    ScatterAdd, ScatterDiv, ScatterMax, ScatterMin, ScatterMul, ScatterNdAdd, ScatterNdSub, ScatterNdUpdate, ScatterSub,
    ScatterUpdate)

# ``from graphpar.ops.operations import *`` (graphpar.ops does) exports the primitive classes only: the submodule
# names above (nn_ops, math_ops, ...) must not replace graphpar.ops' own modules of the same names.

__all__ = sorted(n for n, v in list(globals().items()) if not n.startswith("_") and isinstance(v, type))
