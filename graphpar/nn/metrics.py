"""Evaluation metrics with MindSpore's names (``Model(..., metrics={"acc", "loss"})``).

Here in ``graphpar.nn.metrics``, MindSpore 1.x's home of the metrics (still in its tutorials), below ``train``;
``graphpar.train.metrics`` re-exports them.

A metric accumulates on the host: ``clear()``, ``update(*inputs)`` per batch, ``eval()`` at the end. Classification
metrics take ``(logits, labels)`` with labels as class indices or one-hot rows; ``Loss`` takes the batch loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _np(x: Any) -> np.ndarray:
    return np.asarray(x)


def _labels(y: Any, n_classes: int) -> np.ndarray:
    y = _np(y)
    if y.ndim >= 2 and y.shape[-1] == n_classes:
        return y.argmax(-1)
    return y.reshape(-1).astype(np.int64)


class Metric:
    """Base class."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        raise NotImplementedError

    def update(self, *inputs: Any) -> None:
        raise NotImplementedError

    def eval(self) -> float:
        raise NotImplementedError


class Accuracy(Metric):
    """Fraction of samples whose arg-max prediction equals the label (``eval_type='classification'``)."""

    def __init__(self, eval_type: str = "classification"):
        self.eval_type = eval_type
        super().__init__()

    def clear(self):
        self._correct, self._total = 0, 0

    def update(self, *inputs):
        if len(inputs) != 2:
            raise ValueError(f"Accuracy.update takes (logits, labels), got {len(inputs)} inputs")
        logits, labels = _np(inputs[0]), inputs[1]
        if self.eval_type == "multilabel":
            pred = (logits > 0.5).astype(np.int64)
            self._correct += int(np.all(pred == _np(labels), axis=-1).sum())
            self._total += pred.shape[0]
            return
        pred = logits.reshape(-1, logits.shape[-1]).argmax(-1)
        y = _labels(labels, logits.shape[-1])
        self._correct += int((pred == y).sum())
        self._total += int(y.size)

    def eval(self):
        if self._total == 0:
            raise RuntimeError("Accuracy.eval(): no samples were seen; call update() first")
        return self._correct / self._total


class TopKCategoricalAccuracy(Metric):
    def __init__(self, k: int):
        if k < 1:
            raise ValueError(f"TopKCategoricalAccuracy: k must be >= 1, got {k}")
        self.k = k
        super().__init__()

    def clear(self):
        self._correct, self._total = 0, 0

    def update(self, *inputs):
        logits = _np(inputs[0])
        y = _labels(inputs[1], logits.shape[-1])
        top = np.argsort(-logits, axis=-1)[:, :self.k]
        self._correct += int((top == y[:, None]).any(-1).sum())
        self._total += int(y.size)

    def eval(self):
        if self._total == 0:
            raise RuntimeError("TopKCategoricalAccuracy.eval(): no samples were seen")
        return self._correct / self._total


class Top1CategoricalAccuracy(TopKCategoricalAccuracy):
    def __init__(self):
        super().__init__(1)


class Top5CategoricalAccuracy(TopKCategoricalAccuracy):
    def __init__(self):
        super().__init__(5)


class Loss(Metric):
    """Mean of the batch losses seen."""

    def clear(self):
        self._sum, self._count = 0.0, 0

    def update(self, *inputs):
        loss = _np(inputs[0])
        self._sum += float(loss.mean()) if loss.size else 0.0
        self._count += 1

    def eval(self):
        if self._count == 0:
            raise RuntimeError("Loss.eval(): no batch was seen")
        return self._sum / self._count


class MAE(Metric):
    def clear(self):
        self._sum, self._count = 0.0, 0

    def update(self, *inputs):
        err = np.abs(_np(inputs[0]) - _np(inputs[1]))
        self._sum += float(err.reshape(err.shape[0], -1).mean(-1).sum()) if err.ndim else float(err)
        self._count += err.shape[0] if err.ndim else 1

    def eval(self):
        return self._sum / max(self._count, 1)


class MSE(MAE):
    def update(self, *inputs):
        err = np.square(_np(inputs[0]) - _np(inputs[1]))
        self._sum += float(err.reshape(err.shape[0], -1).mean(-1).sum()) if err.ndim else float(err)
        self._count += err.shape[0] if err.ndim else 1


_NAMES = {"acc": Accuracy, "accuracy": Accuracy, "loss": Loss, "top_1_accuracy": Top1CategoricalAccuracy,
          "top_5_accuracy": Top5CategoricalAccuracy, "mae": MAE, "mse": MSE}


def get_metric_fn(name: str) -> Metric:
    cls = _NAMES.get(name)
    if cls is None:
        raise ValueError(f"unknown metric {name!r}; valid names: {', '.join(sorted(_NAMES))}")
    return cls()


def get_metrics(metrics: Any) -> dict[str, Metric]:
    """MindSpore's forms: a set/list of names or a dict of name → Metric."""
    if metrics is None:
        return {}
    if isinstance(metrics, dict):
        for name, m in metrics.items():
            if not isinstance(m, Metric):
                raise TypeError(f"metrics[{name!r}] must be a Metric, got {type(m).__name__}")
        return dict(metrics)
    if isinstance(metrics, (set, list, tuple)):
        return {name: get_metric_fn(name) for name in metrics}
    raise TypeError(f"metrics must be a set of names or a dict of Metrics, got {type(metrics).__name__}")
