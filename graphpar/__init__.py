"""graphpar: MindSpore's parallel-training surface, run by JAX/XLA on a device mesh.

``import graphpar as ms`` and a MindSpore script's calls work: ``ms.set_context``, ``ms.set_auto_parallel_context``,
``ms.nn``, ``ms.ops``, ``ms.dataset``, ``ms.train.Model``. Nothing runs at import time but four registrations, where
a lower layer must reach a higher one (docs/architecture.md, "Layers"): ``graphpar.nn`` runs compiled Cell calls and
train steps through the runner ``graphpar.compile`` implements (``nn.runner``); a Graph or a dump draws itself in a
notebook with ``graphpar.viz`` (``ir.notebook``); ``get_auto_parallel_context("global_rank")`` defaults to the rank
``graphpar.communication`` computes (``_context.register_rank_source``); ``common.api``'s
``_cell_graph_executor`` plans through ``graphpar.compile`` (``common.api.register_graph_compiler``); a Tensor,
being a ``jax.Array``, gets MindSpore's ``asnumpy()`` / ``numpy()`` / ``dim()`` (``common.tensor.install_methods``).
Importing any module of graphpar runs this file first, so all five are in place before anything runs.
"""

from graphpar import context as context
from graphpar import nn as nn
from graphpar import ops as ops
from graphpar import runtime as runtime
from graphpar._context import GRAPH_MODE as GRAPH_MODE
from graphpar._context import PYNATIVE_MODE as PYNATIVE_MODE
from graphpar._context import ParallelMode as ParallelMode
from graphpar._context import get_algo_parameters as get_algo_parameters
from graphpar._context import get_auto_parallel_context as get_auto_parallel_context
from graphpar._context import get_context as get_context
from graphpar._context import reset_algo_parameters as reset_algo_parameters
from graphpar._context import reset_auto_parallel_context as reset_auto_parallel_context
from graphpar._context import set_algo_parameters as set_algo_parameters
from graphpar._context import set_auto_parallel_context as set_auto_parallel_context
from graphpar._context import set_context as set_context
from graphpar._context import set_op_strategy_config as set_op_strategy_config
from graphpar.common import dtype as dtype
from graphpar.common.dtype import (  # noqa: F401
    bfloat16, bool_, complex64, complex128, float16, float32, float64, int8, int16, int32, int64, uint8, uint16,
    uint32, uint64)
from graphpar.common.initializer import initializer as initializer
from graphpar.common.parameter import Parameter as Parameter
from graphpar.common.parameter import ParameterTuple as ParameterTuple
from graphpar.common.seed import get_seed as get_seed
from graphpar.common.seed import set_seed as set_seed
from graphpar.common.tensor import Tensor as Tensor
from graphpar.common.symbol import Symbol as Symbol
from graphpar.common.api import register_graph_compiler as _register_graph_compiler
from graphpar.compile.cell_executor import CellGraphCompiler as _CellGraphCompiler
from graphpar.common.tensor import install_methods as _install_tensor_methods
from graphpar.compile.cell_runner import CompiledCellRunner as _CompiledCellRunner
from graphpar.nn.functional_shard import shard as shard
from graphpar.ops.layout_ops import reshard as reshard
from graphpar.planner.layout import Layout as Layout
from graphpar.compile.functional.jit import JitConfig as JitConfig
from graphpar.compile.functional.jit import jit as jit
from graphpar.context import get_ps_context as get_ps_context
from graphpar.context import set_ps_context as set_ps_context
from graphpar.nn.runner import register_runner as _register_runner
from graphpar.ops.composite import grad as grad
from graphpar.ops.composite import value_and_grad as value_and_grad
from graphpar.train import (  # noqa: F401
    Callback, DynamicLossScaleManager, FixedLossScaleManager, LossMonitor, LossScaleManager, Model, Profiler,
    RunContext, SummaryCollector, TimeMonitor)
from graphpar.train.export import export as export
from graphpar.train.serialization import (  # noqa: F401
    build_searched_strategy, load_checkpoint, load_distributed_checkpoint, load_param_into_net,
    merge_sliced_parameter, save_checkpoint, transform_checkpoints)

from graphpar._version import __version__ as __version__

# notebooks: a Graph, Dump or DumpSet draws itself with graphpar.viz, a layer above its own (graphpar.ir.notebook)
from graphpar.viz.notebook import register as _register_notebook_views
_register_notebook_views()

_register_runner(_CompiledCellRunner())
# mindspore.common.api's _cell_graph_executor plans through the engine (graphpar.common.api)
_register_graph_compiler(_CellGraphCompiler())

# MindSpore's Tensor methods jax.Array lacks (asnumpy, numpy, dim): a Tensor is a jax.Array
_install_tensor_methods()

# the settings' default global_rank is this process's rank, which the settings layer cannot compute
from graphpar._context import register_rank_source as _register_rank_source
from graphpar.communication import get_rank as _get_rank
_register_rank_source(_get_rank)

_LAZY = {"dataset", "communication", "train", "parallel", "models", "checkpoint", "amp"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"graphpar.{name}")
    raise AttributeError(f"module 'graphpar' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazily imported subpackages too, so that ``dir(graphpar)`` and tab completion show ``ms.parallel``."""
    return sorted(set(globals()) | _LAZY)
