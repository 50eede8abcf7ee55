"""Parallel planning: strategies, layouts, the mesh, the pass pipeline; ``plan(...)`` shows a plan in memory."""

from graphpar.parallel.plan_api import plan as plan  # noqa: F401  (graphpar.parallel.plan(net, *inputs))
