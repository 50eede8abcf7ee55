"""The planner: strategies, sharding rules, the pass pipeline, the cost model and the strategy search.

It turns a traced graph (``graphpar.ir``) into per-op strategies and per-value layouts on a device mesh. It imports
only the layers below it (``graphpar.ir``, ``graphpar.common`` and the settings); lowering and running a plan is
``graphpar.compile``'s job, and the public entry points live in ``graphpar.parallel``.
"""
