"""What the search reads besides the graph: the per-device memory budget and the hardware whose time it minimises.

``set_context(max_device_memory="30GB")`` is MindSpore's setting and format (a number followed by ``GB``); here it
bounds the plan's predicted per-device peak memory (``parallel.memory_model``: parameters with the optimizer
state of the optimizer the step runs, the batch, the activations kept for the backward pass and the reduced
gradients), calibrated against the compiled program's ``memory_analysis()``. It applies to the AUTO_PARALLEL searches; other modes take no decisions it
could bound, which is said once when it is set there.

The hardware is the platform's: the calibration file's constants when ``python -m bench calibrate`` measured them
(``planner.calibration``; one INFO line says which, shared with the stage search), else the built-in ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from graphpar._context import parse_memory  # the format is the setting's (see _context.values)
from graphpar._env import interfered_sapp
from graphpar._logging import notice_once
from graphpar.errors import GraphparError
from graphpar.planner.calibration import platform_hardware
from graphpar.planner.search.costs import DEFAULT_HW, HARDWARE, Hardware

SEARCH_MODES = ("recursive_programming", "dynamic_programming")


class MemoryBudgetError(GraphparError, ValueError):
    """No plan the search can make fits ``max_device_memory``. Fields: ``budget`` and ``need`` (the smallest
    per-device memory of any plan found, bytes), ``largest`` (the ops that dominate that smallest plan)."""

    def __init__(self, budget: float, need: float, largest: list[str]):
        self.budget, self.need, self.largest = budget, need, largest
        super().__init__(
            f"set_context(max_device_memory={budget / 1024 ** 3:g}GB): no plan fits; the smallest per-device need "
            f"found is {need / 1024 ** 3:.4g}GB ({need:.0f} bytes at the step's predicted peak: parameters with their "
            f"optimizer state and gradients, the batch, activations kept for the backward pass; largest: "
            f"{', '.join(largest)}). Raise max_device_memory to at least "
            f"{need / 1024 ** 3:.4g}GB, use more devices, or reduce the batch")


@dataclass(frozen=True)
class SearchSettings:
    memory_budget: float | None = None  # bytes per device
    hardware: Hardware = DEFAULT_HW
    time_limit: float = 120.0  # seconds for the ILP
    # MS_INTERFERED_SAPP=1 under recursive_programming: the MatMuls take SAPP's partition around the user's
    # strategies (planner.search.sapp_partition), weighed by the cost-model context's rp_matmul_mem_coef
    interfered_sapp: bool = False
    rp_matmul_mem_coef: float = 0.1


def search_settings(parallel_mode: str, search_mode: str, max_device_memory: str | None,
                    platform: str, weights: tuple[float, float, float] | None = None,
                    rp_matmul_mem_coef: float = 0.1) -> SearchSettings:
    """The settings of one plan (called by the compile stage, which reads the context; ``weights``: the
    cost-model context's ``CostModelSettings.objective_weights``; ``rp_matmul_mem_coef``: its SAPP MatMul
    coefficient). ``MS_INTERFERED_SAPP`` is read here, when the plan is made, as MindSpore reads it when it
    compiles."""
    budget = parse_memory(max_device_memory) if max_device_memory else None
    searching = parallel_mode == "auto_parallel" and search_mode in SEARCH_MODES
    if budget is not None and not searching:
        notice_once("max-device-memory", f"set_context(max_device_memory={max_device_memory!r}) bounds the plans "
                    f"of AUTO_PARALLEL's searches ({', '.join(SEARCH_MODES)}); with parallel_mode={parallel_mode!r} "
                    f"and search_mode={search_mode!r} no search runs and the setting has no effect", logging.WARNING)
    # the platform's measured constants when `python -m bench calibrate` wrote them (said once, as the stage
    # search says it), else the built-in ones
    hw = platform_hardware(platform) if searching else HARDWARE.get(platform, DEFAULT_HW)
    interfered = searching and search_mode == "recursive_programming" and interfered_sapp()
    return SearchSettings(budget, objective_hardware(search_mode, hw, weights), interfered_sapp=interfered,
                          rp_matmul_mem_coef=rp_matmul_mem_coef)


TIE_BREAK = 1e-3

# MindSpore's cost_model_context default costmodel_communi_bias (bytes): a collective above
# costmodel_communi_threshold (2048 bytes) is charged its size plus this; one at most the threshold, 3072 bytes.
COMMUNI_BIAS = 1024.0


def objective_hardware(search_mode: str, hw: Hardware, weights: tuple[float, float, float] | None = None) -> Hardware:
    """The weights of the objective ``alpha * messages + beta * bytes + gamma * FLOPs`` each search minimises.

    dynamic_programming: MindSpore's DP objective, ``costmodel_alpha * computation + costmodel_beta *
    communication``, whose communication term has no per-message latency: each collective's bytes are only
    "refined" by ``costmodel_communi_bias`` (a collective above ``costmodel_communi_threshold`` bytes costs its
    size plus the bias; the cost model here keeps a count of collectives, not each one's size, so every collective
    is charged the bias, which is what the large ones that decide a plan pay). In the alpha-beta-gamma form: alpha =
    beta * COMMUNI_BIAS, and the platform's beta and gamma. MindSpore's ``costmodel_gamma`` (0.001, the weight of
    parameter-gradient communication in ``communication_with_partial_para``, which assumes the gradient AllReduce
    hides behind the backward pass) is not applied: a gradient AllReduce is priced in full, as the wire bytes it
    sends, so data parallel is never favoured for traffic it does not save.

    recursive_programming: MindSpore's double recursive search minimises communication; here the platform's beta
    per byte, with latency and compute kept only as tie-breakers (weighted by TIE_BREAK), so among plans that move
    the same bytes the faster one wins.

    ``weights`` = (compute, communication, communi_bias): MindSpore's ``set_cost_model_context`` terms of the DP
    objective, ``costmodel_alpha / 1.0``, ``costmodel_beta / 400.0`` (each relative to MindSpore's default, since
    the platform's constants stand for those defaults here) and ``costmodel_communi_bias`` in bytes; None or
    MindSpore's defaults leave the objective as above. recursive_programming does not read them (nor does MindSpore's
    recursive search)."""
    if search_mode == "recursive_programming":
        return Hardware(f"{hw.name}, communication first", hw.alpha * TIE_BREAK, hw.beta, hw.gamma * TIE_BREAK)
    compute, communication, bias = weights or (1.0, 1.0, COMMUNI_BIAS)
    return Hardware(f"{hw.name}, MindSpore DP (alpha*compute + beta*communication)",
                    hw.beta * communication * bias, hw.beta * communication, hw.gamma * compute)
