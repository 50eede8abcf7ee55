"""Pictures of plans and dumps for notebooks and HTML pages: per-op tables, device grids, byte charts, graphs.

Everything here renders :mod:`graphpar.dump.model` objects (what the dump reader and ``graphpar.parallel.plan``
build), so a page can be drawn from dump files alone, without JAX or the network. See docs/notebooks.md.
"""
