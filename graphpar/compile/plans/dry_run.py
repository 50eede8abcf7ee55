"""Plans for device counts this machine does not have: ``plan_for_devices`` and ``graphpar plan SCRIPT --devices N``.

Planning needs the graph (traced from abstract shapes) and the mesh's axis sizes (:class:`MeshInfo`), never a
device: the pipeline runs exactly as for a real job of N devices, and the cost model predicts per device memory and
collective bytes per step. The mesh a compiled program would use is given as a ``jax.sharding.AbstractMesh``.
Lowering to HLO for N devices is not done.

``graphpar plan`` calls :func:`plan_script`: it runs the user's script, and the first step the script compiles
(``Model.train``, a ``TrainOneStepCell`` call, a forward) plans for N virtual devices, returns the summary and ends
the script; :func:`plan_script` returns that summary. The batch is MindSpore's per-device batch: the script's
global batch divided by its own device count, times N (``dataset_strategy="full_batch"`` keeps the batch as it is).
The plan-only plan hooks the compile stage's protocol: its ``trace_avals`` scales the batch and its ``request`` (which
the orchestrator calls with the traced graph) plans and raises :class:`PlanDone`, which unwinds the script
back to :func:`plan_script`.
"""

from __future__ import annotations

import runpy
import sys
import time
from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import AbstractMesh

from graphpar import _context
from graphpar._context import ParallelMode, parse_memory
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.execution import ExecutionPlan
from graphpar.compile.plans.plan_summary import PlanSummary
from graphpar.compile.plans.stage_file import save_pipeline
from graphpar.compile.plans.stage_profile import search_pipeline
from graphpar.ir.graph import Graph
from graphpar.planner import strategy_file
from graphpar.planner.passes.context import PlanRequest
from graphpar.planner.planning import plan_graph
from graphpar.planner.cost import plan_cost, predicted_peak, sum_costs
from graphpar.planner.memory_model import DEFAULT_OPTIMIZER_SLOTS, graph_optimizer_slots
from graphpar.planner.search.settings import search_settings


class PlanDone(SystemExit):
    """Raised by the plan-only plan once the plan is made: ends the user's script, back to :func:`plan_script`
    (a ``SystemExit``, so that the script's own ``except Exception`` does not swallow it)."""

    def __init__(self, summary: PlanSummary):
        super().__init__(0)
        self.summary = summary


def _modes(pctx: Any) -> tuple[str, str]:
    mode, search = pctx.parallel_mode, pctx.search_mode
    if mode == ParallelMode.STAND_ALONE:
        return ParallelMode.AUTO_PARALLEL, "recursive_programming"  # what the search would do
    if mode == ParallelMode.DATA_PARALLEL:
        return ParallelMode.SEMI_AUTO_PARALLEL, search  # data-parallel defaults on every op: DP's plan
    return mode, search


def plan_graph_for_devices(graph: Graph, devices: int, purpose: str = "train", pctx: Any = None,
                           platform: str = "gpu", optimizer: Any = None, network: Any = None) -> PlanSummary:
    """Plan a traced ``graph`` (global shapes for ``devices`` devices) with the pass pipeline, on a mesh of
    ``devices`` devices that need not exist. ``optimizer``: the one training would run (its state per parameter
    counts in the memory predicted; without one, Adam's two moments are assumed). With ``auto_pipeline=True`` in
    AUTO_PARALLEL and the ``network`` traced, the stage search runs too (``PlanSummary.stages``); the memory budget
    then bounds the pipelined plan, and the whole graph's intra-op plan (one stage) is made without it; with a
    ``strategy_ckpt_config`` save_file the plan and its stages are written there (``stage_file``)."""
    pctx = pctx if pctx is not None else _context.current_parallel()
    mode, search_mode = _modes(pctx)
    started = time.perf_counter()
    budget = _context.current().max_device_memory
    pipelined = (pctx.auto_pipeline and network is not None and purpose == "train"
                 and mode == ParallelMode.AUTO_PARALLEL)
    slots = graph_optimizer_slots(graph, optimizer)
    stages = None
    if pipelined:
        per_param = [v for v in (slots or {}).values()]
        stages = search_pipeline(network, graph, devices, platform, parse_memory(budget) if budget else None,
                                 max(per_param) if per_param else DEFAULT_OPTIMIZER_SLOTS,
                                 stages=pctx.pipeline_stages if pctx.pipeline_stages > 1 else None)
    graph = plan_graph(graph, PlanRequest(
        devices, mode, search_mode, purpose, pctx.dataset_strategy, strategy_file.for_plan(pctx),
        search_settings(mode, search_mode, None if pipelined else budget, platform,
                        _context.current_cost_model().objective_weights,
                        _context.current_cost_model().rp_matmul_mem_coef),
        slots, algo=_context.current_algo(), propagation_order=pctx.propagation_order))
    if stages is not None:  # the searched pipeline goes to strategy_ckpt_config's save_file, if one is set
        params = {v.name for v in graph.values.values() if v.kind == "param" and v.producer is None}
        save_pipeline(network, graph, stages, pctx, set(slots) if slots else params, slots)
    info = graph.plan.mesh
    training = purpose == "train"
    per_node = plan_cost(graph, info, training=training)
    total = sum_costs(per_node.values())
    return PlanSummary(devices, mode, search_mode, AbstractMesh(info.sizes, info.names), graph,
                       predicted_peak(graph, info, per_node, training), total.comm_bytes, total.messages,
                       time.perf_counter() - started, per_node, _optimizer_text(optimizer, training),
                       dataclasses.replace(pctx, parallel_mode=mode, search_mode=search_mode), stages)


def _optimizer_text(optimizer: Any, training: bool) -> str:
    if not training:
        return "parameters + activations"
    if optimizer is None:
        return (f"parameters x{2 + DEFAULT_OPTIMIZER_SLOTS:g} (weight, gradient, an unknown optimizer's state "
                "assumed Adam's two moments) + activations kept for the backward pass")
    return (f"parameters with {type(optimizer).__name__}'s state, gradients + activations kept for the backward "
            "pass")


def _aval(x: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(np.shape(x)), np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype)


def plan_for_devices(network: Any, *inputs: Any, devices: int, purpose: str = "train",
                     platform: str = "gpu", optimizer: Any = None) -> PlanSummary:
    """Plan ``network`` (the loss network a ``TrainOneStepCell`` wraps, or any Cell for ``purpose="forward"``)
    for ``devices`` devices on global-batch ``inputs`` (arrays or ``jax.ShapeDtypeStruct``), under the context in
    force, without those devices. ``platform`` picks the cost model's hardware ("gpu", "tpu", "cpu");
    ``optimizer`` the optimizer training would use (its state counts in the predicted memory; default: Adam's)."""
    ns = NetworkState(network, network.trainable_params())
    started = time.perf_counter()
    graph, _ = trace_network(ns, [_aval(x) for x in inputs], purpose)
    summary = plan_graph_for_devices(graph, devices, purpose, platform=platform, optimizer=optimizer,
                                     network=network)
    summary.seconds = time.perf_counter() - started
    return summary


class DryRunPlan(ExecutionPlan):
    """The plan ``graphpar plan`` puts in place of the real one: plans for ``devices`` virtual devices and ends
    the script (``graphpar plan`` prints the summary it returns)."""

    name = "plan-only"

    def __init__(self, devices: int, script_devices: int, platform: str, optimizer: Any = None,
                 network: Any = None):
        super().__init__()
        self.network = network  # the loss network the script trains (the stage search re-traces its layer)
        self.devices = jax.local_devices()[:1]
        self.virtual, self.script_devices, self.platform = devices, script_devices, platform
        self.optimizer = optimizer
        self.draws = script_devices  # Model.train stacks this many per-device batches: the script's global batch

    def trace_avals(self, inputs: Sequence[Any], purpose: str) -> list[jax.ShapeDtypeStruct]:
        """The script's global batch for its own device count, as the global batch of ``virtual`` devices."""
        scale = not self.pctx.full_batch and self.pctx.dataset_strategy == "data_parallel"
        avals = []
        for x in inputs:
            shape = tuple(x.shape)
            if scale and shape and shape[0] % self.script_devices == 0:
                shape = (shape[0] // self.script_devices * self.virtual,) + shape[1:]
            avals.append(jax.ShapeDtypeStruct(shape, x.dtype))
        return avals

    def request(self, graph: Graph, purpose: str) -> Any:
        """Plan the traced graph for the virtual devices and end the script with the summary (the orchestrator
        asks for the request of the traced graph: planning starts here)."""
        summary = plan_graph_for_devices(graph, self.virtual, purpose, self.pctx, self.platform,
                                         self.optimizer if purpose == "train" else None, self.network)
        raise PlanDone(summary)


@dataclass(frozen=True)
class DryRunRequest:
    """What ``graphpar plan SCRIPT --devices N`` asks for: N virtual devices, the hardware the cost model prices,
    and the parallel and search modes replacing the script's own (None: the script's)."""

    devices: int
    platform: str = "gpu"
    parallel_mode: str | None = None
    search_mode: str | None = None


# The request of the plan_script call under way (None outside one). The script runs as written, so its first
# compile can learn of the request only from here; plan_script sets it and puts the previous value back.
_requested: DryRunRequest | None = None


def plan_script(script: str, args: Sequence[str], request: DryRunRequest) -> PlanSummary | None:
    """Run ``script`` as ``python script *args`` would, until its first compiled step; that step is planned for
    ``request.devices`` virtual devices and the script ended there. Returns the summary (not printed), or
    None when the script finished without compiling a step. The script's exceptions (a ``GraphparError`` when its
    strategies do not fit the devices) propagate."""
    global _requested
    previous, argv = _requested, sys.argv
    _requested, sys.argv = request, [script] + list(args)
    try:
        runpy.run_path(script, run_name="__main__")
    except PlanDone as done:
        return done.summary
    finally:
        _requested, sys.argv = previous, argv
    return None


def plan_only(network: Any, optimizer: Any = None) -> ExecutionPlan | None:
    """The plan-only plan while :func:`plan_script` runs a script, else None."""
    request = _requested
    if request is None:
        return None
    pctx = _context.current_parallel()
    script_devices = pctx.device_num or jax.device_count()
    plan = DryRunPlan(request.devices, script_devices, request.platform, optimizer, network)
    if request.parallel_mode:
        plan.pctx.parallel_mode = request.parallel_mode
    if request.search_mode:
        plan.pctx.search_mode = request.search_mode
    return plan
