"""``mindspore.ops.operations.math_ops``: the math primitives, re-exported from where graphpar defines them."""

from graphpar.ops.binary_ops import (  # noqa: F401
    Atan2, BitwiseAnd, BitwiseOr, BitwiseXor, DivNoNan, Mod, MulNoNan, TruncateDiv, TruncateMod, Xdivy, Xlogy)
from graphpar.ops.math_ops import (  # noqa: F401
    Abs, Add, AddN, Argmax, Argmin, ArgMaxWithValue, BatchMatMul, Ceil, Cos, CumSum, Div, Equal, Erf, Exp, Floor,
    FloorDiv, FloorMod, Greater, GreaterEqual, Less, LessEqual, Log, LogicalAnd, LogicalNot, LogicalOr, MatMul,
    Maximum, Minimum, Mul, Neg, NotEqual, Pow, RealDiv, Reciprocal, ReduceAll, ReduceAny, ReduceMax, ReduceMean,
    ReduceMin, ReduceProd, ReduceSum, Rsqrt, Sign, Sin, Sqrt, Square, SquaredDifference, Sub, Tanh, TensorAdd)
from graphpar.ops.norm_act_ops import Lerp  # noqa: F401
from graphpar.ops.misc_ops import ArgMinWithValue, Cdist  # noqa: F401
from graphpar.ops.index_ops import InplaceAdd, InplaceSub, InplaceUpdate  # noqa: F401
