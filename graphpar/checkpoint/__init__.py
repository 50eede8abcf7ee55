"""graphpar.checkpoint: MindSpore's checkpoint API on orbax (see docs/checkpoints.md).

``save_checkpoint`` / ``load_checkpoint`` / ``load_param_into_net``, strategy files and distributed checkpoints
(``merge_sliced_parameter``, ``build_searched_strategy``, ``transform_checkpoints``, ``load_distributed_checkpoint``),
and resuming training. MindSpore's names are re-exported from ``graphpar`` and ``graphpar.train``. The
``ModelCheckpoint`` callback and its ``CheckpointConfig`` are training callbacks: ``graphpar.train`` (a layer above
this one) defines them, on the saving and retention functions here.
"""

from graphpar.checkpoint.directory import latest_checkpoint as latest_checkpoint
from graphpar.checkpoint.distributed import build_searched_strategy as build_searched_strategy
from graphpar.checkpoint.distributed import load_distributed_checkpoint as load_distributed_checkpoint
from graphpar.checkpoint.distributed import merge_sliced_parameter as merge_sliced_parameter
from graphpar.checkpoint.distributed import transform_checkpoints as transform_checkpoints
from graphpar.checkpoint.errors import CheckpointError as CheckpointError
from graphpar.checkpoint.serialization import load_checkpoint as load_checkpoint
from graphpar.checkpoint.serialization import load_param_into_net as load_param_into_net
from graphpar.checkpoint.serialization import save_checkpoint as save_checkpoint
from graphpar.checkpoint.store import wait_for_saves as wait_for_saves
from graphpar.planner.strategy_file import ParameterLayout as ParameterLayout
