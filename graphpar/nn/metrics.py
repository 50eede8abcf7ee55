"""``mindspore.nn.metrics`` (MindSpore 1.x's home of the metrics, still in its tutorials): graphpar's metrics live in
:mod:`graphpar.train.metrics`; this module names the same classes so ``from graphpar.nn.metrics import Accuracy``
resolves as the 1.x import did."""

from graphpar.train.metrics import (  # noqa: F401
    MAE, MSE, Accuracy, Loss, Metric, Top1CategoricalAccuracy, Top5CategoricalAccuracy, TopKCategoricalAccuracy)
