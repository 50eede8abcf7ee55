"""Lowering and running plans: trace a network, plan it (``graphpar.planner``), lower the planned graph with its
shardings to one ``jax.jit`` program, compile it and run it with the network's state bound."""
