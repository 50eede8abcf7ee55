"""``mindspore.parallel.nn`` (MindSpore 2.x): the pipeline wrapper under its 2.x name."""

from graphpar.nn.pipeline_cell import Pipeline as Pipeline
