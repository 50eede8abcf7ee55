"""MindSpore's ``mindspore.nn.wrap``: wrapper Cells (``cell_wrapper``: ``WithLossCell``, ``WithEvalCell``,
``TrainOneStepCell``, ``_VirtualDatasetCell``), re-exported here as MindSpore does."""

from graphpar.nn.wrap.cell_wrapper import TrainOneStepCell, WithEvalCell, WithLossCell
from graphpar.nn.wrap.virtual_dataset import _VirtualDatasetCell

__all__ = ["TrainOneStepCell", "WithEvalCell", "WithLossCell", "_VirtualDatasetCell"]
