"""``mindspore.parallel._transformer.op_parallel_config``: the parallel configs
(``graphpar.nn.transformer.op_parallel_config``)."""

from graphpar.nn.transformer.op_parallel_config import MoEParallelConfig as MoEParallelConfig
from graphpar.nn.transformer.op_parallel_config import OpParallelConfig as OpParallelConfig
from graphpar.nn.transformer.op_parallel_config import default_dpmp_config as default_dpmp_config
from graphpar.nn.transformer.op_parallel_config import default_moeparallel_config as default_moeparallel_config

__all__ = ["OpParallelConfig"]
