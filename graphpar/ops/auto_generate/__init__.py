"""``mindspore.ops.auto_generate``: the generated ops MindSpore's parallel tests use (``gen_ops_def``, and the
primitive classes as ``gen_ops_prim``)."""

from graphpar.ops.auto_generate import gen_ops_def as gen_ops_def
from graphpar.ops.auto_generate import gen_ops_prim as gen_ops_prim
from graphpar.ops.norm_act_ops import Swiglu  # noqa: F401
from graphpar.ops.auto_generate.gen_ops_def import (  # noqa: F401
    AddcmulExt, AddExt, SubExt, add_ext, addcmul_ext_op, sub_ext)
from graphpar.ops.fft_ops import (  # noqa: F401
    DCT, DCTN, FFT, FFT2, FFTN, HFFT, HFFT2, HFFTN, IDCT, IDCTN, IFFT, IFFT2, IFFTN, IHFFT, IHFFT2, IHFFTN, IRFFT,
    IRFFT2, IRFFTN, RFFT, RFFT2, RFFTN, FFTShift, IFFTShift)
from graphpar.ops.selection_ops import SplitTensor, SplitWithSize, TopkExt  # noqa: F401
from graphpar.ops.linalg_ops import SolveTriangular, TraceV2  # noqa: F401
from graphpar.ops.linalg_ops import LstsqV2  # noqa: F401
from graphpar.ops.fused_infer_attention_ops import FusedInferAttentionScore  # noqa: F401
