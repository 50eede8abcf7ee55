"""Lowering and running plans: trace a network, plan it (``graphpar.planner``), lower the planned graph with its
shardings to one ``jax.jit`` program, compile it and run it with the network's state bound.

Inside, each subpackage imports only those below it (an import-linter contract in pyproject.toml keeps it):

* ``pipeline``: pipeline parallelism's MPMD program, its schedules and the split into stages;
* ``runtime``: the programs a Cell runs (train step, forward, per-rank calls), their steps bound to live state;
* ``staging``: the stages after planning (``Lowered → Compiled``), the orchestrator that makes them, the cache;
* ``plans``: execution plans, their results (``Traced → Planned``), choosing one, planning for absent devices;
* ``lowering``: a network's pure state, tracing it, the interpreter that re-evaluates a planned graph in JAX.
"""
