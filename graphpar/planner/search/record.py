"""What AUTO_PARALLEL's search leaves on a planned graph (``graph.plan.search``): its per-node records, the
storage layouts it priced, and the numbers of the solve. The begin dump prints it (``search.report``), a dry run
summarises it (``compile.plans.dry_run``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SearchRecord:
    records: Mapping[int, Any]  # node id -> search_pass.NodeRecord: the chosen strategy's cost and the alternatives
    storage: Mapping[int, Any]  # parameter value id -> the storage layout the search priced (place_parameters keeps it)
    objective_s: float
    optimal: bool
    gap: float
    memory_bytes: float  # predicted peak per device of the chosen plan
    budget: float | None  # the memory budget it met (None: none)
    problem: Mapping[str, Any]  # problem.describe: variables, repeated groups, choices, edges
    build_s: float
    solve_s: float
    total_s: float
    hardware: str

    def summary(self) -> dict[str, Any]:
        """The begin dump's ``# search summary`` fields, in order."""
        return {"objective_s": self.objective_s, "memory_bytes": self.memory_bytes, "budget": self.budget,
                "optimal": self.optimal, "gap": self.gap, "hardware": self.hardware, "build_s": self.build_s,
                "solve_s": self.solve_s} | dict(self.problem)
