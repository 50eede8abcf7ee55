"""``SummaryCollector``: MindSpore's summary callback, writing TensorBoard event files.

MindSpore writes its own summary format for MindInsight; graphpar writes TensorBoard's (``events.out.tfevents.*``
under ``summary_dir``, with TensorBoard's own writer), which ``tensorboard --logdir summary_dir`` and any event
reader open. What it collects, per collected step (every ``collect_freq`` steps and the first; per epoch in sink
mode, as in MindSpore):

* ``loss`` (``collect_metric``): the step's loss, as ``LossMonitor`` reads it;
* ``learning_rate``: the optimizer's rate for that step (``Optimizer.get_lr``), when it has one scalar rate;
* ``throughput/steps_per_second``: over the steps since the last collected one;
* ``histogram_regular``: histograms of the parameters whose names match the regular expression, every
  ``collect_tensor_freq`` collected steps (default: each one);
* at the end of ``Model.eval``: each metric as ``eval/<name>``.

What MindInsight alone shows (lineage, the dataset graph, the computational graph, input images, the loss landscape)
is not written: each such setting asked for explicitly is said once (the graph lives in the IR dumps and ``graphpar
ir html``), ``collect_landscape`` and ``export_options`` are refused by name.
"""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np

from graphpar._logging import notice_once
from graphpar.train.callback._callback import Callback, RunContext
from graphpar.train.callback._loss_monitor import loss_value

_KEYS = {"collect_metric": bool, "collect_graph": bool, "collect_train_lineage": bool, "collect_eval_lineage": bool,
         "collect_input_data": bool, "collect_dataset_graph": bool, "histogram_regular": (str, type(None)),
         "collect_landscape": (dict, type(None))}
_MINDINSIGHT_ONLY = {"collect_graph": "the computational graph (graphpar writes it as IR dumps: save_graphs, "
                                      "graphpar ir html)",
                     "collect_train_lineage": "training lineage (a MindInsight page)",
                     "collect_eval_lineage": "evaluation lineage (a MindInsight page)",
                     "collect_input_data": "input images", "collect_dataset_graph": "the dataset graph"}


def _check_int(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"SummaryCollector: {name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"SummaryCollector: {name} must be > 0, got {value}")


class SummaryCollector(Callback):
    """Collect loss, learning rate, throughput and parameter histograms into TensorBoard event files (module
    docstring). The arguments are MindSpore's; ``num_process`` (MindSpore's writer processes) and ``max_file_size``
    are accepted: TensorBoard's writer needs no processes, and a file that reaches ``max_file_size`` bytes is closed
    and a new one begun."""

    def __init__(self, summary_dir: str, collect_freq: int = 10, num_process: int = 32,
                 collect_specified_data: dict | None = None, keep_default_action: bool = True,
                 custom_lineage_data: dict | None = None, collect_tensor_freq: int | None = None,
                 max_file_size: int | None = None, export_options: dict | None = None):
        if not isinstance(summary_dir, str) or not summary_dir:
            raise TypeError(f"SummaryCollector: summary_dir must be a non-empty str, got {summary_dir!r}")
        _check_int("collect_freq", collect_freq)
        _check_int("num_process", num_process)
        _check_int("collect_tensor_freq", collect_tensor_freq, allow_none=True)
        _check_int("max_file_size", max_file_size, allow_none=True)
        if not isinstance(keep_default_action, bool):
            raise TypeError(f"SummaryCollector: keep_default_action must be a bool, got {keep_default_action!r}")
        if export_options:
            raise ValueError("SummaryCollector: export_options (exporting collected tensors as npy) is not "
                             "supported by graphpar; save tensors with ms.save_checkpoint or numpy instead")
        given = dict(collect_specified_data or {})
        for key, value in given.items():
            if key not in _KEYS:
                raise ValueError(f"SummaryCollector: collect_specified_data has no key {key!r}; valid keys: "
                                 + ", ".join(sorted(_KEYS)))
            if not isinstance(value, _KEYS[key]) or (_KEYS[key] is bool and not isinstance(value, bool)):
                raise TypeError(f"SummaryCollector: collect_specified_data[{key!r}] has type "
                                f"{type(value).__name__}")
        if given.get("collect_landscape"):
            raise ValueError("SummaryCollector: collect_landscape (MindInsight's loss landscape) is not supported by "
                             "graphpar; leave it out of collect_specified_data")
        defaults = {k: True for k in _MINDINSIGHT_ONLY} | {"collect_metric": True, "histogram_regular": None}
        self.collect = (defaults if keep_default_action else {k: False for k in defaults} | {"histogram_regular": None})
        self.collect |= {k: v for k, v in given.items() if k != "collect_landscape"}
        for key, what in _MINDINSIGHT_ONLY.items():
            if given.get(key):
                notice_once(f"summary-{key}", f"SummaryCollector: {key}=True: {what} is not written to the "
                                              "TensorBoard file")
        if custom_lineage_data:
            notice_once("summary-lineage", "SummaryCollector: custom_lineage_data is written once as the text "
                                           "summary 'custom_lineage_data'")
        self.summary_dir, self.collect_freq = summary_dir, collect_freq
        self.collect_tensor_freq, self.max_file_size = collect_tensor_freq, max_file_size
        self.custom_lineage_data = dict(custom_lineage_data or {})
        self._histograms = re.compile(self.collect["histogram_regular"]) if self.collect["histogram_regular"] else None
        self._writer: Any = None  # tensorboard's EventFileWriter, made at the first write
        self._bytes = 0  # written to the current file
        self._last: tuple[int, float] | None = None  # (step, time) of the last collected step
        self._collected = 0
        self._step = 0

    # --- writing -----------------------------------------------------------------------------------------------
    def _write(self, step: int, values: list[tuple[str, str, Any]]) -> None:
        """Append one event of ``values`` (``(kind, tag, value)``: "scalar", "histogram" or "text") at ``step``."""
        # imported here: tensorboard's protos and writer cost ~0.2 s to import, which `import graphpar` should not
        # pay for a callback most runs never make
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        if self._writer is None:
            self._writer, self._bytes = EventFileWriter(self.summary_dir, filename_suffix=".graphpar"), 0
        protos = []
        for kind, tag, value in values:
            if kind == "scalar":
                protos.append(summary_pb2.Summary.Value(tag=tag, simple_value=float(value)))
            elif kind == "histogram":
                protos.append(summary_pb2.Summary.Value(tag=tag, histo=summary_pb2.HistogramProto(**_histogram(value))))
            else:
                text_plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
                tensor = {"dtype": "DT_STRING", "string_val": [value.encode()], "tensor_shape": {}}
                protos.append(summary_pb2.Summary.Value(tag=tag, tensor=tensor,
                                                        metadata=summary_pb2.SummaryMetadata(plugin_data=text_plugin)))
        event = event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=protos))
        self._writer.add_event(event)
        self._bytes += event.ByteSize() + 16  # TFRecord framing: length, its CRC, the data's CRC
        if self.max_file_size is not None and self._bytes >= self.max_file_size:
            self.close()  # the next write begins a new file

    # --- hooks -------------------------------------------------------------------------------------------------
    def begin(self, run_context: RunContext) -> None:
        if self.custom_lineage_data and self._collected == 0:
            text = "\n".join(f"{k}: {v}" for k, v in self.custom_lineage_data.items())
            self._write(0, [("text", "custom_lineage_data", text)])

    def step_end(self, run_context: RunContext) -> None:
        cb = run_context.original_args()
        if cb.get("mode") == "eval":
            return
        step = int(cb.cur_step_num)
        self._step = step
        unit = int(cb.cur_epoch_num) if cb.get("dataset_sink_mode") else step  # MindSpore: epochs in sink mode
        if self._last is not None and unit % self.collect_freq != 0:
            return
        now, values = time.perf_counter(), []
        if self.collect["collect_metric"]:
            loss = loss_value(cb.net_outputs)
            if loss is not None:
                values.append(("scalar", "loss", loss))
        optimizer = cb.get("optimizer")
        if optimizer is not None:
            lr = np.asarray(optimizer.get_lr())
            if lr.size == 1:
                values.append(("scalar", "learning_rate", float(lr)))
        if self._last is not None and now > self._last[1] and step > self._last[0]:
            per_second = (step - self._last[0]) / (now - self._last[1])
            values.append(("scalar", "throughput/steps_per_second", per_second))
        if self._histograms is not None and self._collected % (self.collect_tensor_freq or 1) == 0:
            network = cb.get("network") or cb.get("train_network")
            for param in network.get_parameters():  # by Parameter name, as MindSpore's histogram_regular matches
                if self._histograms.search(param.name):
                    values.append(("histogram", f"{param.name}/histogram", np.asarray(param.asnumpy())))
        self._last, self._collected = (step, now), self._collected + 1
        if values:
            self._write(step, values)

    def epoch_end(self, run_context: RunContext) -> None:
        if self._writer is not None:
            self._writer.flush()

    def end(self, run_context: RunContext) -> None:
        cb = run_context.original_args()
        if cb.get("mode") == "eval" and self.collect["collect_metric"]:
            results = {name: np.asarray(metric.eval()) for name, metric in (cb.get("metrics") or {}).items()}
            values = [("scalar", f"eval/{name}", float(v)) for name, v in results.items() if v.size == 1]
            if values:
                self._write(self._step, values)
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __exit__(self, *err: Any) -> None:
        self.close()


def _histogram(values: np.ndarray) -> dict[str, Any]:
    """TensorBoard's HistogramProto fields for ``values`` (30 buckets at most)."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    counts, edges = np.histogram(flat, bins=min(30, max(flat.size, 1)))
    return {"min": float(flat.min()), "max": float(flat.max()), "num": float(flat.size), "sum": float(flat.sum()),
            "sum_squares": float((flat ** 2).sum()), "bucket_limit": [float(e) for e in edges[1:]],
            "bucket": [float(c) for c in counts]}
