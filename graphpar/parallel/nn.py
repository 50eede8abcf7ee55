"""``mindspore.parallel.nn`` (MindSpore 2.x): the pipeline and gradient-accumulation wrappers under their 2.x names."""

from graphpar.nn.pipeline_cell import Pipeline as Pipeline
from graphpar.nn.grad_accumulation import GradAccumulation as GradAccumulation
from graphpar.nn.grad_reducer import PipelineGradReducer as PipelineGradReducer
from graphpar.nn.micro_interleaved import MicroBatchInterleaved as MicroBatchInterleaved
