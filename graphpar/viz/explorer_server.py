"""Serving a plan to Model Explorer on 127.0.0.1: ``graphpar ir explore DIR``, ``PlanView.explore()`` in notebooks,
and a Model Explorer adapter extension for ``.ir`` dump files.

The graph JSON and node data come from :mod:`graphpar.viz.explorer`; this module hands them to Model Explorer's own
server (``model_explorer.visualize_from_config``), started in a daemon thread on ``127.0.0.1`` only (never another
address), and returns where it listens. Model Explorer's server asks pypi.org and github.com for a newer release of
itself when it starts and when its page asks; graphpar replaces that check with one that reports none, so serving a
plan sends nothing beyond 127.0.0.1. ``model_explorer`` is an optional dependency (``pip install -e
'.[explorer]'``): it is imported when a server starts, and its absence is an :class:`ExplorerError` that says how to
install it.

For Model Explorer's own command, :mod:`graphpar.viz.explorer_adapter` is an adapter extension for ``.ir`` files.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from graphpar.dump.loading import DumpSet
from graphpar.errors import GraphparError
from graphpar.viz.explorer import explorer_graphs

HOST = "127.0.0.1"  # Model Explorer serves the plan to this machine only
_INSTALL = "pip install ai-edge-model-explorer (or pip install -e '.[explorer]' in a graphpar checkout)"


class ExplorerError(GraphparError, RuntimeError):
    """Model Explorer is not installed, or its server did not start."""


def _model_explorer() -> Any:
    try:
        return importlib.import_module("model_explorer")
    except ImportError:
        raise ExplorerError(f"Model Explorer is not installed: {_INSTALL}") from None


_NO_UPDATE = {"version": "", "runningVersion": "", "releaseUrl": "", "desktopAppUrl": ""}


def _offline(me: Any) -> None:
    """Model Explorer's release check (a request to pypi.org, then github.com) answered locally: no newer release."""
    server = importlib.import_module(me.__name__ + ".server")
    server._check_new_version = lambda print_msg=True: dict(_NO_UPDATE)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex((HOST, port)) == 0


@dataclass(frozen=True)
class Explorer:
    """A Model Explorer server holding one plan: ``url`` opens it (the graph and its overlays), on 127.0.0.1.
    In a notebook it shows the view in an iframe; the server lives as long as the Python process."""

    url: str
    port: int
    graphs: tuple[str, ...]
    height: int = 800

    def _repr_html_(self) -> str:
        return (f'<iframe src="{self.url}" width="100%" height="{self.height}" style="border:1px solid #dee2e6">'
                f'</iframe><p style="font-size:11px">Model Explorer: <a href="{self.url}" target="_blank">open in a '
                f"new tab</a> (graphs: {', '.join(self.graphs)})</p>")

    def __repr__(self) -> str:
        return f"<Explorer {self.url}>"


def serve(sets: list[DumpSet], port: int | None = None, name: str = "graphpar plan", timeout: float = 60.0) -> Explorer:
    """Start Model Explorer on 127.0.0.1:``port`` (default: a free port) with the graphs of ``sets`` (one graph
    each: e.g. every rank of a PlanView, or ``[summary.dumps()]`` of a ``plan_for_devices`` PlanSummary) and their
    node data overlays; returns once it answers."""
    me = _model_explorer()
    _offline(me)
    graphs, overlays = explorer_graphs(sets)
    config = me.config()
    # Model Explorer's config takes ready graph JSON under a graphs://NAME/INDEX source, as its PyTorch path does
    config.graphs_list.append(json.dumps(graphs))
    config.model_sources.append({"url": f"graphs://{name}/0"})
    for label, data in overlays:
        config.add_node_data(name=label, node_data=json.dumps(data), model_name=name)
    chosen = port or _free_port()
    if _listening(chosen):
        raise ExplorerError(f"Model Explorer: port {chosen} on {HOST} is in use by another process; valid: a free "
                            "port (leave --port / port= out to get one)")
    start = lambda: me.visualize_from_config(config=config, host=HOST, port=chosen,  # noqa: E731
                                             no_open_in_browser=True)
    with contextlib.redirect_stdout(io.StringIO()):  # its banner and "Loading extensions..."; the URL is ours
        threading.Thread(target=start, daemon=True, name=f"model-explorer-{chosen}").start()
        deadline = time.monotonic() + timeout
        while not _listening(chosen):
            if time.monotonic() > deadline:
                raise ExplorerError(f"Model Explorer did not start on {HOST}:{chosen} within {timeout:g} s")
            time.sleep(0.1)
    url = f"http://{HOST}:{chosen}/?data={config.to_url_param_value()}"
    return Explorer(url, chosen, tuple(g["id"] for g in graphs["graphs"]))
