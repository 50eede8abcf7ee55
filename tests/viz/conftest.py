"""The compiled 2-layer GPT plan the viz tests read (Model Explorer's graph, the summary's width), made once."""

from __future__ import annotations

import pytest

import graphpar as ms
import graphpar.parallel
from graphpar import _context
from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell


@pytest.fixture(scope="session")
def gpt_plan(tmp_path_factory):
    """The 2-layer GPT's train step under SEMI_AUTO_PARALLEL (dp=2, mp=4, Megatron hints), compiled, with dumps."""
    dumps = tmp_path_factory.mktemp("gpt") / "ir_dumps"
    _context.reset_context()
    _context.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=True, save_graphs_path=str(dumps))
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", dataset_strategy="data_parallel")
    try:
        plan = graphpar.parallel.plan(gpt_train_cell(GPT(layers=2)), *gpt_data())
    finally:
        _context.reset_context()
        _context.reset_auto_parallel_context()
    return plan, dumps
