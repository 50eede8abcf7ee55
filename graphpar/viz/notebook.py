"""The notebook views of a Graph, a Dump and a DumpSet: what their ``_repr_html_`` shows.

Those classes sit below viz (``graphpar.ir``, ``graphpar.dump``), so they ask the registry of
:mod:`graphpar.ir.notebook` for their HTML; :func:`register` fills it with the renderers here, and
``graphpar/__init__`` calls it when graphpar is imported.
"""

from __future__ import annotations

import math

from graphpar import _context
from graphpar.dump.loading import DumpSet
from graphpar.dump.model import Dump
from graphpar.dump.reader import parse_text
from graphpar.dump.writer import PlanDescription, begin_texts
from graphpar.ir.graph import Graph
from graphpar.ir.notebook import register_explorer, register_html
from graphpar.viz.explorer_server import Explorer, serve
from graphpar.viz.html import dump_html, dump_views, wrap


def graph_html(graph: Graph) -> str | None:
    """A planned graph's begin-dump views (None for a graph not planned yet: the notebook shows its repr)."""
    mesh = graph.plan.mesh
    if mesh is None or any(n.strategy is None for n in graph.node_list()):
        return None
    described = PlanDescription(_context.current_parallel(), math.prod(mesh.sizes))
    begin = parse_text(begin_texts(graph, described, [0])[0], f"<graph {graph.name}>")
    return wrap(dump_views(begin, None))


def dump_set_html(dset: DumpSet) -> str:
    """The views of one graph's begin and execute dumps on one rank."""
    return wrap(dump_views(dset.begin, dset.execute))


def explore_dump_set(dset: DumpSet, port: int | None) -> Explorer:
    """One graph's dumps in Model Explorer (``PlanSummary.explore()``: a ``plan_for_devices`` plan's begin dump)."""
    return serve([dset], port)


def register() -> None:
    """Fill :mod:`graphpar.ir.notebook`'s registries: Graph, Dump and DumpSet draw themselves with these views, and
    a DumpSet opens in Model Explorer."""
    register_html(Graph, graph_html)
    register_html(Dump, dump_html)
    register_html(DumpSet, dump_set_html)
    register_explorer(DumpSet, explore_dump_set)
