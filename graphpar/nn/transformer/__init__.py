"""graphpar.nn.transformer: MindSpore's parallel transformer pieces (``mindspore.nn.transformer`` in 1.x,
``mindspore.parallel._transformer`` in 2.x) that graphpar builds: the parallel configs and the Mixture of Experts
layer with its routers."""

from graphpar.nn.transformer.moe import MoE as MoE
from graphpar.nn.transformer.moe import MoEConfig as MoEConfig
from graphpar.nn.transformer.op_parallel_config import MoEParallelConfig as MoEParallelConfig
from graphpar.nn.transformer.op_parallel_config import OpParallelConfig as OpParallelConfig
from graphpar.nn.transformer.op_parallel_config import TransformerOpParallelConfig as TransformerOpParallelConfig
from graphpar.nn.transformer.router import Router as Router
from graphpar.nn.transformer.router import TopkRouter as TopkRouter

__all__ = ["MoE", "MoEConfig", "MoEParallelConfig", "OpParallelConfig", "TransformerOpParallelConfig", "Router",
           "TopkRouter"]
