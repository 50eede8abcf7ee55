"""The graph IR: a traced network as op nodes over its jaxpr (``graph``), built by ``trace`` from what ``recorder``
noted of each op call; the bottom of the engine, above the settings and ``graphpar.common``."""
