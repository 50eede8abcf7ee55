"""graphpar.train: ``Model``, callbacks and metrics (``from graphpar.train import Model, LossMonitor``)."""

from graphpar.train import metrics as metrics
from graphpar.train.callback import Callback as Callback
from graphpar.train.callback import CheckpointConfig as CheckpointConfig
from graphpar.train.callback import ModelCheckpoint as ModelCheckpoint
from graphpar.train.callback import History as History
from graphpar.train.callback import HistoryPlot as HistoryPlot
from graphpar.train.callback import LossMonitor as LossMonitor
from graphpar.train.callback import RunContext as RunContext
from graphpar.train.callback import SummaryCollector as SummaryCollector
from graphpar.train.callback import TimeMonitor as TimeMonitor
from graphpar.train.metrics import (  # noqa: F401
    MAE, MSE, Accuracy, Loss, Metric, Top1CategoricalAccuracy, Top5CategoricalAccuracy, TopKCategoricalAccuracy)
from graphpar.train.loss_scale_manager import (  # noqa: F401
    DynamicLossScaleManager, FixedLossScaleManager, LossScaleManager)
from graphpar.train.model import Model as Model
from graphpar.train.profiler import Profiler as Profiler
from graphpar.train.serialization import (  # noqa: F401
    build_searched_strategy, load_checkpoint, load_distributed_checkpoint, load_param_into_net,
    merge_sliced_parameter, save_checkpoint, transform_checkpoints)
