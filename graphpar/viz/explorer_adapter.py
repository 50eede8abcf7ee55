"""Model Explorer's adapter extension for graphpar's IR dumps: ``model-explorer rank_0/step_parallel_begin_0000.ir
--extensions=graphpar.viz.explorer_adapter`` opens a dump file (with its same-counter twin, as ``graphpar ir``
does) as the graph of :mod:`graphpar.viz.explorer`, nested by Cell scope.

Model Explorer's extension loader imports this module and finds the :class:`Adapter` subclass in it, so it imports
``model_explorer`` at the top: import it only where Model Explorer is installed (``pip install -e '.[explorer]'``).
Node data overlays (predicted / measured bytes, memory) come with ``graphpar ir explore``, which hands them to the
server beside the graph; an adapter returns graphs only.
"""

from __future__ import annotations

from dacite import from_dict
from model_explorer import Adapter, AdapterMetadata, ModelExplorerGraphs, graph_builder

from graphpar.dump.loading import load
from graphpar.viz.explorer import explorer_graphs


class GraphparAdapter(Adapter):
    """Opens ``step_parallel_begin_NNNN.ir`` / ``NN_execute_NNNN.ir`` (both dumps of the graph when both exist)."""

    metadata = AdapterMetadata(id="graphpar_ir", name="graphpar IR dump adapter",
                               description="graphpar's step_parallel_begin / execute dumps, nested by Cell scope",
                               source_repo="", fileExts=["ir"])

    def __init__(self):
        super().__init__()

    def convert(self, model_path: str, settings: dict) -> ModelExplorerGraphs:
        graphs, _ = explorer_graphs([load(model_path)])
        return {"graphs": [from_dict(graph_builder.Graph, g) for g in graphs["graphs"]]}
