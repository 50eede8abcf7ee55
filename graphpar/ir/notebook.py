"""Notebook HTML (and Model Explorer) for objects of the lower layers, by ``graphpar.viz``: registries filled when
graphpar loads.

A :class:`~graphpar.ir.graph.Graph`, a dump (``graphpar.dump.model.Dump``) or a dump set
(``graphpar.dump.loading.DumpSet``) shows itself in a notebook with the per-op tables, device grids and pictures of
``graphpar.viz``. viz sits above the IR and the dumps, which must not import it (docs/architecture.md: a layer
imports only the layers below it), so their ``_repr_html_`` asks this registry for the renderer of their type.
``graphpar/__init__`` fills it (``graphpar.viz.notebook.register``) when graphpar is imported, which happens before
any of its modules is, so a renderer is always there; a type nobody registered is an error that says so. The
same holds for :func:`explore`: a plan of the compile layer (``plan_for_devices``' PlanSummary) opens Model
Explorer through the server that ``graphpar.viz`` registers for its dumps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from graphpar.errors import GraphparError

T = TypeVar("T")

_RENDERERS: dict[type, Callable[[Any], str | None]] = {}
_EXPLORERS: dict[type, Callable[[Any, int | None], Any]] = {}


class NoHtmlView(GraphparError, LookupError):
    """No HTML renderer is registered for ``cls`` (graphpar.viz registers them when graphpar is imported)."""

    def __init__(self, cls: type, what: str = "HTML view"):
        self.cls = cls
        super().__init__(f"no {what} of {cls.__name__} is registered: graphpar.viz.notebook.register() fills "
                         "them, and `import graphpar` calls it")


def register_html(cls: type[T], render: Callable[[T], str | None]) -> None:
    """Draw objects of exactly type ``cls`` with ``render`` (``None``: nothing to draw, the notebook shows the repr)."""
    _RENDERERS[cls] = render


def html_of(obj: Any) -> str | None:
    """The HTML of ``obj`` for ``_repr_html_``, by the renderer registered for its type."""
    render = _RENDERERS.get(type(obj))
    if render is None:
        raise NoHtmlView(type(obj))
    return render(obj)


def register_explorer(cls: type[T], open_: Callable[[T, int | None], Any]) -> None:
    """Open objects of exactly type ``cls`` in Model Explorer with ``open_(obj, port)`` (it returns the server's
    handle, which shows the view in a notebook)."""
    _EXPLORERS[cls] = open_


def explore(obj: Any, port: int | None = None) -> Any:
    """``obj`` served to Model Explorer on 127.0.0.1:``port`` (a free port when None), by the opener registered
    for its type."""
    open_ = _EXPLORERS.get(type(obj))
    if open_ is None:
        raise NoHtmlView(type(obj), "Model Explorer view")
    return open_(obj, port)
