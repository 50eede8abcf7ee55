"""``mindspore.parallel._transformer``'s names that graphpar builds (the layers are in ``graphpar.nn.transformer``):
the parallel configs and the Mixture of Experts config. MindSpore's other transformer layers (``Transformer``,
``MultiHeadAttention``, ...) are not built; ``graphpar.models.GPT`` is a transformer written with graphpar's ops."""

from graphpar.nn.transformer.moe import MoEConfig as MoEConfig
from graphpar.nn.transformer.op_parallel_config import OpParallelConfig as OpParallelConfig
from graphpar.nn.transformer.op_parallel_config import TransformerOpParallelConfig as TransformerOpParallelConfig

__all__ = ["MoEConfig", "OpParallelConfig", "TransformerOpParallelConfig"]
