"""Evaluation metrics with MindSpore's names (``Model(..., metrics={"acc", "loss"})``): defined in
:mod:`graphpar.nn.metrics`, below ``train``, and named here too (``from graphpar.train.metrics import Accuracy``)."""

from graphpar.nn.metrics import MAE as MAE
from graphpar.nn.metrics import MSE as MSE
from graphpar.nn.metrics import Accuracy as Accuracy
from graphpar.nn.metrics import Loss as Loss
from graphpar.nn.metrics import Metric as Metric
from graphpar.nn.metrics import Top1CategoricalAccuracy as Top1CategoricalAccuracy
from graphpar.nn.metrics import Top5CategoricalAccuracy as Top5CategoricalAccuracy
from graphpar.nn.metrics import TopKCategoricalAccuracy as TopKCategoricalAccuracy
from graphpar.nn.metrics import get_metric_fn as get_metric_fn
from graphpar.nn.metrics import get_metrics as get_metrics
