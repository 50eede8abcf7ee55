"""graphpar.ops: MindSpore's primitives as objects with ``.shard()``, plus functional helpers.

``ops.MatMul().shard(((2, 4), (4, 1)))`` records a strategy; calling the op inside ``construct`` computes it and,
while tracing, records an op node for the graph IR.
"""

from graphpar.ops import auto_generate as auto_generate
from graphpar.ops import composite as composite
from graphpar.ops import functional as functional
from graphpar.ops.attention_ops import flash_attention_score as flash_attention_score
from graphpar.ops.infer_attention_functional import fused_infer_attention_score as fused_infer_attention_score
from graphpar.ops.infer_attention_functional import incre_flash_attention as incre_flash_attention
from graphpar.ops.infer_attention_functional import prompt_flash_attention as prompt_flash_attention
from graphpar.ops.composite import GradOperation as GradOperation
from graphpar.ops.composite import grad as grad
from graphpar.ops.composite import value_and_grad as value_and_grad
from graphpar.ops import operations as operations
from graphpar.ops.functional import (  # noqa: F401
    abs, cast, concat, depend, div, fill, lerp, matmul, ones, rank, relu, reshape, scalar_to_array, scalar_to_tensor, shape,
    softmax, stop_gradient, transpose, tuple_to_array, zeros)
from graphpar.ops.operations import *  # noqa: F401,F403
from graphpar.ops.operations import Primitive as Primitive
