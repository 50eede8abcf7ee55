"""Training callbacks (``from graphpar.train.callback import LossMonitor``)."""

from graphpar.train.callback._callback import Callback as Callback
from graphpar.train.callback._callback import CallbackList as CallbackList
from graphpar.train.callback._callback import InternalCallbackParam as InternalCallbackParam
from graphpar.train.callback._callback import RunContext as RunContext
from graphpar.train.callback._history import History as History
from graphpar.train.callback._history import HistoryPlot as HistoryPlot
from graphpar.train.callback._loss_monitor import LossMonitor as LossMonitor
from graphpar.train.callback._progress import ProgressBar as ProgressBar
from graphpar.train.callback._time_monitor import TimeMonitor as TimeMonitor
from graphpar.train.callback._checkpoint import CheckpointConfig as CheckpointConfig
from graphpar.train.callback._checkpoint import ModelCheckpoint as ModelCheckpoint
from graphpar.train.callback._summary import SummaryCollector as SummaryCollector
