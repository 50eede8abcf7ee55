"""Every primitive class (``from graphpar.ops import operations as P``, as MindSpore scripts write)."""

from graphpar.ops.array_ops import (  # noqa: F401
    Cast, Concat, Depend, ExpandDims, Fill, Flatten, Gather, GatherV2, OneHot, Pad, Reshape, Select, Shape, Slice,
    Split, Squeeze, Stack, StridedSlice, TensorToScalar, Tile, Transpose)
from graphpar.ops.binary_ops import (  # noqa: F401
    Atan2, BitwiseAnd, BitwiseOr, BitwiseXor, DivNoNan, MaskedFill, Mod, MulNoNan, TruncateDiv, TruncateMod, Xdivy,
    Xlogy)
from graphpar.ops.comm_ops import (  # noqa: F401
    AllGather, AllReduce, AlltoAll, Broadcast, ReduceOp, ReduceScatter)
from graphpar.ops.conv_transpose import Conv2DBackpropInput, Conv2DTranspose  # noqa: F401
from graphpar.ops.debug_ops import Print  # noqa: F401
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
from graphpar.ops.primitive import Primitive  # noqa: F401
from graphpar.ops.fft_ops import (  # noqa: F401
    DCT, DCTN, FFT, FFT2, FFTN, HFFT, HFFT2, HFFTN, IDCT, IDCTN, IFFT, IFFT2, IFFTN, IHFFT, IHFFT2, IHFFTN, IRFFT,
    IRFFT2, IRFFTN, RFFT, RFFT2, RFFTN, FFTShift, IFFTShift)
from graphpar.ops.selection_ops import SplitTensor, SplitWithSize, TopkExt  # noqa: F401
from graphpar.ops.detection_ops import BoundingBoxEncode  # noqa: F401
from graphpar.ops.linalg_ops import LstsqV2, SolveTriangular, TraceV2  # noqa: F401
from graphpar.ops.math_extra_ops import (  # noqa: F401
    ApproximateEqual, Cholesky, Cummax, Cummin, CumProd, Elu, Eye, FillV2, HShrink, Invert, Lgamma, LpNorm,
    PopulationCount, ReverseV2, SquareSumAll, Trunc, Tril)
from graphpar.ops.random_extra_ops import Gamma, RandomChoiceWithMask, UniformReal  # noqa: F401
from graphpar.ops.image_ops import GridSampler2D  # noqa: F401
from graphpar.ops.scatter_ops import (  # noqa: F401
    ScatterAdd, ScatterDiv, ScatterMax, ScatterMin, ScatterMul, ScatterNdAdd, ScatterNdSub, ScatterNdUpdate, ScatterSub,
    ScatterUpdate)
