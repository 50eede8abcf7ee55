"""``graphpar.parallel``: the public parallel API, as ``mindspore.parallel`` is.

``plan(network_or_train_cell, *example_inputs)`` shows a plan in memory; ``plan_for_devices(...)`` makes one for a
device count this machine does not have; ``graphpar.parallel.nn`` holds MindSpore 2.x's ``Pipeline`` and
``GradAccumulation``; ``AutoParallel`` (also ``graphpar.parallel.auto_parallel.AutoParallel``) plans a step function
in a parallel mode. This package is a facade at the top of the layers (docs/architecture.md): it re-exports from
the engine (``graphpar.planner`` decides strategies and layouts, ``graphpar.compile`` runs them) and holds no logic.
"""

from graphpar.compile.plans.dry_run import PlanSummary as PlanSummary
from graphpar.parallel.auto_parallel import AutoParallel as AutoParallel
from graphpar.compile.plans.dry_run import plan_for_devices as plan_for_devices
from graphpar.parallel.plan_api import plan as plan

__all__ = ["plan", "plan_for_devices", "PlanSummary", "AutoParallel"]
