"""Views of plans and dumps: per-op tables, device grids, byte charts and graphs for notebooks and HTML pages
(``html``, ``svg``, ``page``, ``plan``), the text tables ``graphpar ir`` prints (``text``), and the notebook views of
the IR's and the dumps' own objects (``notebook``, registered with ``graphpar.ir.notebook`` when graphpar loads).

Everything here renders :mod:`graphpar.dump.model` objects (what the dump reader and ``graphpar.parallel.plan``
build), so a page can be drawn from dump files alone, without JAX or the network. See docs/notebooks.md.
"""
