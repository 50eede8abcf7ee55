"""``Profiler``: MindSpore's profiler API over ``jax.profiler``, writing an XProf trace.

``Profiler(output_path="./data")`` starts collecting at once (``start_profile=True``, MindSpore's default);
``stop()`` or ``analyse()`` ends it. The trace is JAX's: ``output_path/plugins/profile/<run>/<host>.xplane.pb``,
which XProf (``xprof --logdir output_path``, or TensorBoard's profile plugin) opens. Each compiled program's HLO
travels inside the trace, and graphpar lowers every op under the named scope ``{Cell scope}/{op}#{node}``
(``compile.lowering.interpret``), so XProf's trace viewer and op profile name each XLA op by the Cell and op it
came from (``Default/network-WithLossCell/_backbone-Net/matmul#0``).

MindSpore's arguments that only its Ascend tool chain reads (``profiler_level``, ``aicore_metrics``, ``l2_cache``,
...) are accepted and said once; ``with_stack`` records Python frames; ``profile_memory`` also writes the device
memory profile (``memory.prof``, pprof format) at ``stop()``; ``schedule`` and ``on_trace_ready`` (the step-window
API) are refused by name.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import jax

from graphpar._logging import notice_once

_ASCEND_ONLY = ("profiler_level", "activities", "aicore_metrics", "l2_cache", "hbm_ddr", "pcie", "sync_enable",
                "data_process", "parallel_strategy", "data_simplification", "mstx", "op_time",
                "profile_communication", "host_stack", "record_shapes", "timeline_limit", "export_type",
                "mstx_domain_include", "mstx_domain_exclude", "sys_io", "sys_interconnect")
_REFUSED = {"schedule": "the step-window schedule", "on_trace_ready": "a callback when a trace is ready"}


class Profiler:
    """Collect an XProf trace of everything the process runs between ``start()`` and ``stop()`` (module
    docstring)."""

    def __init__(self, output_path: str = "./data", start_profile: bool = True, with_stack: bool = False,
                 profile_memory: bool = False, **kwargs: Any):
        for key in kwargs:
            if key in _REFUSED:
                raise ValueError(f"Profiler: {key} ({_REFUSED[key]}) is not supported by graphpar; start() and "
                                 "stop() the Profiler around the steps to trace")
            if key not in _ASCEND_ONLY:
                raise TypeError(f"Profiler got an unexpected argument {key!r}; graphpar's Profiler takes "
                                "output_path, start_profile, with_stack, profile_memory and MindSpore's "
                                "Ascend-only settings (accepted, without effect)")
        for key in kwargs:
            notice_once(f"profiler-{key}", f"Profiler: {key} is read by MindSpore's Ascend tool chain only; the "
                                           "XProf trace is the same without it")
        if not isinstance(output_path, str) or not output_path:
            raise TypeError(f"Profiler: output_path must be a non-empty str, got {output_path!r}")
        self.output_path = str(Path(output_path).resolve())
        self.with_stack, self.profile_memory = bool(with_stack), bool(profile_memory)
        self._running = False
        if start_profile:
            self.start()

    def start(self) -> None:
        if self._running:
            raise RuntimeError("Profiler.start(): the profiler is already collecting; stop() it first")
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 1 if self.with_stack else 0
        options.enable_hlo_proto = True  # each program's HLO in the trace: how XProf names ops by Cell
        os.makedirs(self.output_path, exist_ok=True)
        jax.profiler.start_trace(self.output_path, profiler_options=options)
        self._running = True

    def stop(self) -> None:
        if not self._running:
            raise RuntimeError("Profiler.stop(): the profiler is not collecting; start() it first")
        jax.effects_barrier()  # the steps dispatched so far belong to this trace
        for array in jax.live_arrays():
            array.block_until_ready()
        jax.profiler.stop_trace()
        self._running = False
        if self.profile_memory:
            jax.profiler.save_device_memory_profile(os.path.join(self.output_path, "memory.prof"))

    def analyse(self) -> list[Path]:
        """Stop collecting (if it still is) and return the trace files written under ``output_path``; XProf
        does the analysis (``xprof --logdir output_path``)."""
        if self._running:
            self.stop()
        traces = sorted(Path(self.output_path).glob("plugins/profile/*/*.xplane.pb"))
        notice_once("profiler-analyse", f"Profiler: the XProf trace is in {self.output_path} (open it with "
                                        f"`xprof --logdir {self.output_path}` or TensorBoard's profile plugin)",
                    logging.INFO)
        return traces

    def __enter__(self) -> "Profiler":
        if not self._running:
            self.start()
        return self

    def __exit__(self, *err: Any) -> None:
        if self._running:
            self.stop()
