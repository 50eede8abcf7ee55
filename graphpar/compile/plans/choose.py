"""Pick the execution plan for a network from the context in force (one place decides)."""

from __future__ import annotations

from typing import Any

import jax

from graphpar import _context
from graphpar._context import PYNATIVE_MODE, ParallelMode
from graphpar._logging import notice_once
from graphpar.communication.devices import job_devices
from graphpar.compile.plans.dry_run import plan_only
from graphpar.compile.plans.execution import DataParallelPlan, ExecutionPlan, StandAlonePlan
from graphpar.compile.plans.semi_auto import semi_auto_plan
from graphpar.errors import ParallelModeError
from graphpar.nn.cell import Cell
from graphpar.ops.primitive import Primitive


def hinted_ops(network: Cell) -> list[tuple[str, Primitive]]:
    """(cell path, op) of every op in ``network`` that carries a ``shard()`` strategy."""
    out = []
    for path, cell in network.cells_and_names():
        for name, value in vars(cell).items():
            if isinstance(value, Primitive) and value.in_strategy is not None:
                out.append((f"{path}.{name}" if path else name, value))
    return out


def _stand_alone_device() -> jax.Device:
    local = jax.local_devices(backend=_context.current().device_target.lower())
    device_id = _context.current().device_id
    return local[device_id] if device_id < len(local) else local[0]


def choose_plan(network: Cell, optimizer: Any = None, compiled: bool = False) -> ExecutionPlan:
    """``optimizer``: the one a train step runs (its state is part of the per-device memory a plan predicts);
    ``compiled``: plan as in GRAPH_MODE whatever the mode (a ``graphpar.jit`` function is compiled in PYNATIVE_MODE
    too, as MindSpore's ``jit`` is)."""
    only = plan_only(network, optimizer)  # `graphpar plan SCRIPT --devices N`
    if only is not None:
        return only
    ctx, pctx = _context.current(), _context.current_parallel()
    mode = pctx.parallel_mode
    pynative = ctx.mode == PYNATIVE_MODE and not compiled
    if mode in (ParallelMode.STAND_ALONE, ParallelMode.DATA_PARALLEL):
        hinted = hinted_ops(network)
        if hinted:
            notice_once(f"ignored-strategies:{mode}", f"parallel_mode={mode!r}: the shard() strategies of "
                        f"{len(hinted)} op(s) ({', '.join(p for p, _ in hinted[:4])}"
                        f"{', ...' if len(hinted) > 4 else ''}) are accepted and ignored, as in MindSpore; they apply "
                        "in SEMI_AUTO_PARALLEL and AUTO_PARALLEL")
    if mode != ParallelMode.STAND_ALONE:
        layerwise = [p.name for p in network.get_parameters() if p.layerwise_parallel]
        if layerwise:
            notice_once(f"layerwise-parallel:{mode}", f"parallel_mode={mode!r}: Parameter(s) "
                        f"{', '.join(layerwise[:4])}{', ...' if len(layerwise) > 4 else ''} have "
                        "layerwise_parallel=True: MindSpore leaves their gradients unreduced (each device updates "
                        "its own copy); graphpar keeps one value per Parameter and reduces their gradients like any "
                        "other's")
    if not pynative and pctx.full_batch and mode == ParallelMode.STAND_ALONE:
        notice_once("full-batch-stand-alone", "full_batch=True in parallel_mode='stand_alone': the one device's "
                    "batch is the whole batch, so it changes nothing (MindSpore's compile refuses it)")
    elif not pynative and pctx.full_batch and mode not in (ParallelMode.SEMI_AUTO_PARALLEL,
                                                           ParallelMode.AUTO_PARALLEL):
        # MindSpore's _check_full_batch, run on every graph compile
        raise ParallelModeError("full_batch=True (dataset_strategy='full_batch')", mode, "MindSpore refuses it when "
                                "the graph is compiled: full_batch applies in 'semi_auto_parallel' and "
                                "'auto_parallel' only. Use full_batch=False here, or one of those modes")
    if mode == ParallelMode.STAND_ALONE:
        return StandAlonePlan(_stand_alone_device(), pynative=pynative)
    devices = job_devices(pctx.device_num)
    if pynative:
        notice_once("pynative-one-device", f"PYNATIVE_MODE runs eagerly on one device; parallel_mode={mode!r} is "
                    f"computed with the same semantics over {len(devices)} virtual device(s)")
        if mode == ParallelMode.DATA_PARALLEL:
            return DataParallelPlan([_stand_alone_device()], pctx.gradients_mean, replicas=len(devices),
                                    pynative=True)
        return semi_auto_plan(network, [_stand_alone_device()], pctx, n_virtual=len(devices), optimizer=optimizer)
    if mode == ParallelMode.DATA_PARALLEL:
        if pctx.dataset_strategy != "data_parallel":
            notice_once("dataset-strategy-data-parallel", f"parallel_mode='data_parallel': dataset_strategy="
                        f"{pctx.dataset_strategy!r} has no effect, as in MindSpore (it applies in SEMI_AUTO_PARALLEL "
                        "and AUTO_PARALLEL); each device trains on the batch it loads")
        return DataParallelPlan(devices, pctx.gradients_mean)
    return semi_auto_plan(network, devices, pctx, optimizer=optimizer)
