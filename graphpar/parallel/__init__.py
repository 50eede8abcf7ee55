"""``graphpar.parallel``: the public parallel API, as ``mindspore.parallel`` is.

``plan(network_or_train_cell, *example_inputs)`` shows a plan in memory; ``plan_for_devices(...)`` makes one for a
device count this machine does not have; ``graphpar.parallel.nn`` holds MindSpore 2.x's ``Pipeline`` and
``GradAccumulation``; ``AutoParallel`` (also ``graphpar.parallel.auto_parallel.AutoParallel``) plans a step
function in a parallel mode; ``strategies(...)`` each op's strategy keyed as MindSpore's tests and strategy files
key it; ``set_algo_parameters`` / ``get_algo_parameters`` / ``reset_algo_parameters`` / ``set_op_strategy_config``
the settings of AUTO_PARALLEL's planner; ``Layout``, ``shard`` and ``function.reshard`` are MindSpore 2.x's
explicit layouts. This package is a facade at the top of the layers (docs/architecture.md): it re-exports from the
engine (``graphpar.planner`` decides strategies and layouts, ``graphpar.compile`` runs them) and holds no logic.
"""

from graphpar._context import get_algo_parameters as get_algo_parameters
from graphpar._context import reset_algo_parameters as reset_algo_parameters
from graphpar._context import set_algo_parameters as set_algo_parameters
from graphpar._context import set_op_strategy_config as set_op_strategy_config
from graphpar.compile.plans.dry_run import PlanSummary as PlanSummary
from graphpar.ops.layout_ops import reshard as reshard
from graphpar.parallel import function as function
from graphpar.parallel.shard import Layout as Layout
from graphpar.parallel.shard import shard as shard  # the function; the module stays importable by its path
from graphpar.parallel.auto_parallel import AutoParallel as AutoParallel
from graphpar.compile.plans.dry_run import plan_for_devices as plan_for_devices
from graphpar.compile.plans.stage_file import load_pipeline_plan as load_pipeline_plan
from graphpar.parallel import nn as nn
from graphpar.parallel.plan_api import plan as plan
from graphpar.parallel.strategies import strategies as strategies

__all__ = ["nn", "plan", "plan_for_devices", "load_pipeline_plan", "PlanSummary", "AutoParallel", "strategies", "set_algo_parameters",
           "get_algo_parameters", "reset_algo_parameters", "set_op_strategy_config", "Layout", "shard", "reshard",
           "function"]
