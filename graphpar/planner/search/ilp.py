"""The exact solver: Alpa's intra-operator ILP, solved with HiGHS (``highspy``).

Variables: a binary ``x[g, i]`` per variable ``g`` and choice ``i`` (one-hot: ``sum_i x[g, i] = 1``), and a
continuous ``y[e, a, b] >= 0`` per edge ``e`` and pair of layout classes, tied to the choices by its marginals
(``sum_b y[e, a, b] = sum of x[u, i] over the choices i of u in class a``, the same for ``v``): with one-hot ``x``
these force ``y[e, a, b] = 1`` exactly on the chosen pair, so the edge variables need no integrality.
Objective: ``sum unary_time . x + sum edge_cost . y`` (microseconds). Memory (``memory_model.peak_bytes``): the
peak is fixed + max(backward, update), so a budget is two rows, ``backward . x + edge_memory . y + t <= budget -
fixed`` and ``update . x <= budget - fixed``, with a continuous ``t >= transient_g . x_g`` for every variable ``g``
(the plan's largest transient buffer). The smallest need minimises a continuous ``m`` above both rows.

Deterministic: one thread, a fixed random seed, zero optimality gap, and variables created in a fixed order, so the
same problem gives the same plan in every process. A time limit (default 120 s) bounds pathological cases: the best
plan found by then is used and the gap is reported.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass

import highspy
import numpy as np

from graphpar.planner.search.problem import Problem

_SCALE = 1e6  # seconds -> microseconds: keeps HiGHS's absolute tolerances far below any real difference


@contextmanager
def _stdout_closed():
    """Point the process's file descriptor 1 at /dev/null for a moment.

    HiGHS writes its banner ("Running HiGHS ... Copyright ...") from C++ straight to the process's stdout when a
    solver object is constructed, before any option (``output_flag``) can be set, so neither Python's
    ``sys.stdout`` nor HiGHS's options can silence it. The constructor is the only thing run while the descriptor
    points elsewhere.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _silent_highs() -> highspy.Highs:
    with _stdout_closed():
        return highspy.Highs()


class Infeasible(Exception):
    """No choice satisfies the constraints (the memory budget)."""


@dataclass(frozen=True)
class Solution:
    choice: list[int]
    objective: float  # seconds, recomputed exactly from the choice
    optimal: bool
    gap: float
    method: str


def solve_ilp(problem: Problem, budget: float | None = None, time_limit: float = 120.0,
              minimize: str = "time") -> Solution:
    """The optimal choice (``minimize="time"``: the objective; ``"memory"``: the smallest per-device memory, for
    the error that names it) under the memory ``budget``."""
    variables, edges = problem.variables, problem.edges
    if not variables:
        return Solution([], problem.objective([]), True, 0.0, "nothing to choose")
    x_start = []
    n = 0
    for var in variables:
        x_start.append(n)
        n += var.size
    n_x = n
    y_start = []
    for e in edges:
        y_start.append(n)
        n += e.cost.size
    t_col, m_col = n, n + 1  # the largest transient buffer; the peak (minimize="memory")
    n += 2
    backward, update, transient, cost = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    for g in range(len(variables)):
        cols = slice(x_start[g], x_start[g] + variables[g].size)
        cost[cols] = problem.unary_time(g) * _SCALE
        backward[cols] = problem.memory(g)
        update[cols] = problem.update_memory(g)
        transient[cols] = problem.transient(g)
    for e, start in zip(edges, y_start):
        cost[start:start + e.cost.size] = e.cost.ravel() * _SCALE
        backward[start:start + e.cost.size] = e.memory.ravel()
    scale = max(float(np.abs(backward).max(initial=0.0)), float(np.abs(update).max(initial=0.0)),
                float(transient.max(initial=0.0)), 1.0)
    backward[t_col] = scale  # + t
    if minimize == "memory":
        cost = np.zeros(n)
        cost[m_col] = 1e3
    rows_start, rows_index, rows_value, lower, upper = [0], [], [], [], []

    def row(index, value, lo, hi):
        rows_index.extend(index)
        rows_value.extend(value)
        rows_start.append(len(rows_index))
        lower.append(lo)
        upper.append(hi)

    for g, var in enumerate(variables):
        row(range(x_start[g], x_start[g] + var.size), [1.0] * var.size, 1.0, 1.0)
    for e, start in zip(edges, y_start):
        na, nb = e.cost.shape
        for a in range(na):
            xs = [x_start[e.u] + i for i in np.flatnonzero(e.u_class == a)]
            row([start + a * nb + b for b in range(nb)] + xs, [1.0] * nb + [-1.0] * len(xs), 0.0, 0.0)
        for b in range(nb):
            xs = [x_start[e.v] + j for j in np.flatnonzero(e.v_class == b)]
            row([start + a * nb + b for a in range(na)] + xs, [1.0] * na + [-1.0] * len(xs), 0.0, 0.0)
    bounded = budget is not None or minimize == "memory"
    if bounded:
        for g, var in enumerate(variables):  # t >= the transient of g's choice
            cols = [x_start[g] + i for i in range(var.size) if transient[x_start[g] + i]]
            if cols:
                row(cols + [t_col], [transient[c] / scale for c in cols] + [-1.0], -highspy.kHighsInf, 0.0)
        limit = (budget - problem.fixed_memory) / scale if budget is not None else highspy.kHighsInf
        for vector in (backward, update):
            used = [c for c in np.flatnonzero(vector) if c != m_col]
            values = [vector[c] / scale for c in used]
            if minimize == "memory":  # vector . x - m <= 0
                row(used + [m_col], values + [-1.0], -highspy.kHighsInf, 0.0)
            if budget is not None:
                row(used, values, -highspy.kHighsInf, limit)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(lower)
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(n)
    col_upper = np.ones(n)
    col_upper[t_col] = col_upper[m_col] = highspy.kHighsInf
    lp.col_upper_ = col_upper
    lp.row_lower_ = np.array(lower)
    lp.row_upper_ = np.array(upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(rows_start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(rows_index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(rows_value)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n_x + [highspy.HighsVarType.kContinuous] * (n - n_x)
    h = _silent_highs()
    for key, value in (("output_flag", False), ("threads", 1), ("random_seed", 0), ("mip_rel_gap", 0.0),
                       ("mip_abs_gap", 1e-9), ("time_limit", float(time_limit))):
        h.setOptionValue(key, value)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    values = np.asarray(h.getSolution().col_value)
    if status == highspy.HighsModelStatus.kInfeasible or len(values) != n:
        raise Infeasible(h.modelStatusToString(status))
    choice = [int(np.argmax(values[x_start[g]:x_start[g] + var.size])) for g, var in enumerate(variables)]
    info = h.getInfo()
    gap = float(info.mip_gap) if status != highspy.HighsModelStatus.kOptimal else 0.0
    return Solution(choice, problem.objective(choice), status == highspy.HighsModelStatus.kOptimal, gap,
                    "ILP (HiGHS)")
