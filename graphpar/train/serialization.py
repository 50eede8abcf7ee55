"""``mindspore.train.serialization``: checkpoint functions (implemented in ``graphpar.checkpoint``)."""

from graphpar.checkpoint.distributed import build_searched_strategy as build_searched_strategy
from graphpar.checkpoint.distributed import load_distributed_checkpoint as load_distributed_checkpoint
from graphpar.checkpoint.distributed import merge_sliced_parameter as merge_sliced_parameter
from graphpar.checkpoint.distributed import transform_checkpoints as transform_checkpoints
from graphpar.checkpoint.serialization import load_checkpoint as load_checkpoint
from graphpar.checkpoint.serialization import load_param_into_net as load_param_into_net
from graphpar.checkpoint.serialization import save_checkpoint as save_checkpoint
