"""The parsed form of an IR dump: dataclasses the reader fills and ``graphpar ir`` reads.

Standard library only (besides graphpar's errors and the notebook registry of ``graphpar.ir.notebook``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphpar.errors import GraphparError
from graphpar.ir.notebook import html_of


def strategy_text(strategy: tuple) -> str:
    """MindSpore's spelling ``((2, 4), (4))``, as the writer prints it."""
    return "(" + ", ".join("(" + ", ".join(str(d) for d in row) + ")" for row in strategy) + ")"


def layout_text(layout: tuple[tuple[str, ...], ...]) -> str:
    return "(" + ", ".join(".".join(a) if a else "-" for a in layout) + ("," if len(layout) == 1 else "") + ")"

FORMAT_VERSION = 1


class DumpError(GraphparError, ValueError):
    """A dump file or directory that cannot be read: ``path``, ``line`` (1-based, or None) and ``reason``."""

    def __init__(self, path: str | Path, reason: str, line: int | None = None):
        self.path, self.line, self.reason = str(path), line, reason
        super().__init__(f"{self.path}:{line}: {reason}" if line is not None else f"{self.path}: {reason}")


@dataclass(frozen=True)
class TensorType:
    """``<Tensor[Float32], (16, 32)>``: MindSpore dtype name and shape (global or per-device, per the dump kind)."""

    dtype: str
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"<Tensor[{self.dtype}], {self.shape}>"


@dataclass
class Input:
    """``%para0_w = Parameter() : <...>  # layout: (m1.m2, -)  # split: (4, 1)``."""

    name: str  # value reference, e.g. ``%para0_w``
    role: str  # Parameter / State / Data
    type: TensorType
    layout: tuple[tuple[str, ...], ...]  # mesh axes per dimension; () = not split
    split: tuple[int, ...]  # ways each dimension is split
    line: int


@dataclass
class Provenance:
    """Why a node has its strategy: ``user``, ``propagated`` (from ``source`` over an edge of ``cost`` bytes per
    device), ``default`` (data parallel) or ``fallback`` (no sharding rule: replicated)."""

    kind: str
    source: int | None = None
    source_name: str | None = None
    cost: float | None = None
    detail: str = ""
    text: str = ""
    breakdown: dict[str, float] | None = None  # the cost model's record of the choice (edge/op bytes, flops, ...)


@dataclass
class Collective:
    """One collective the compiled program runs, as an execute dump lists it after the node that caused it."""

    name: str  # ``%c3``
    kind: str  # AllReduce / AllGather / ReduceScatter / AlltoAll / CollectivePermute / Broadcast
    arg: str  # the value it moves (``%4``), "" when unattributed
    instance_name: str
    attrs: dict[str, Any]
    op: str | None  # reduction (sum, max, ...) or None
    group: tuple[int, ...]  # the ranks of the group containing this dump's rank
    bytes: int  # bytes of the result per device
    pass_: str  # forward / backward
    cause: str  # operator / redistribution of input k / redistribution of output k
    hlo: str  # HLO instruction name
    input_types: list[TensorType]
    output_types: list[TensorType]
    scope: str
    node: int | None  # node id it is attributed to; None = not attributed to an op
    line: int
    wire_bytes: float | None = None  # bytes one device sends (ring algorithms), the unit of "collective bytes"
    parameters: tuple[str, ...] = ()  # a fused gradient reduction: the Parameters whose gradients it carries


@dataclass
class Node:
    """One op node line."""

    id: int
    outputs: list[str]  # ``%4``
    kind: str  # MatMul / ReLU / ... (or a raw JAX primitive name such as ``mul``)
    instance_name: str
    args: list[str]
    primitive_attrs: dict[str, Any]
    in_strategy: tuple[tuple[int, ...], ...] | None  # the strategy the op runs with
    input_types: list[TensorType]
    output_types: list[TensorType]
    scope: str
    provenance: Provenance | None
    device_matrix: tuple[int, ...] | None
    in_layouts: list[tuple[tuple[str, ...], ...]]
    line: int
    collectives: list[Collective] = field(default_factory=list)
    predicted_bytes: float | None = None  # execute dumps: the cost model's collective wire bytes for this op
    out_layouts: list[tuple[tuple[str, ...], ...]] = field(default_factory=list)  # as the op leaves its outputs

    @property
    def hint(self) -> tuple | None:
        """The user's ``shard()`` strategy, when there is one."""
        value = self.primitive_attrs.get("in_strategy")
        return value if isinstance(value, tuple) else None

    @property
    def strategy_text(self) -> str:
        return strategy_text(self.in_strategy) if self.in_strategy is not None else ""

    @property
    def collective_bytes(self) -> int:
        return sum(c.bytes for c in self.collectives)

    @property
    def wire_bytes(self) -> float:
        """Measured collective bytes in the project's unit (what one device sends)."""
        return sum(c.wire_bytes or 0.0 for c in self.collectives)


@dataclass
class ParameterConflict:
    """``# parameter conflict: w stored as (-, -); wanted by a (node 3) as (m1, -), ...; redistribution N B ...``."""

    parameter: str
    stored: tuple[tuple[str, ...], ...]
    wanted: list[tuple[str, int, tuple[tuple[str, ...], ...]]]  # (instance name, node id, layout)
    cost_bytes: float
    line: int


@dataclass
class Dump:
    """One parsed dump file."""

    path: str
    kind: str  # step_parallel_begin / execute
    format_version: int | None
    header: dict[str, str]
    graph: str = ""
    purpose: str = ""
    rank: int | None = None
    n_ranks: int | None = None
    parallel_mode: str = ""
    search_mode: str = ""
    mesh: dict[str, int] = field(default_factory=dict)
    passes: dict[str, float] = field(default_factory=dict)  # pass name -> milliseconds
    inputs: list[Input] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    unattributed: list[Collective] = field(default_factory=list)
    conflicts: list[ParameterConflict] = field(default_factory=list)
    returns: list[str] = field(default_factory=list)
    total_bytes: int | None = None  # execute dumps: the ``# total collective bytes per step`` line
    total_wire_bytes: float | None = None  # ... its measured wire bytes
    total_predicted_bytes: float | None = None  # ... and the cost model's prediction
    comments: list[tuple[int, str]] = field(default_factory=list)  # unknown ``#`` lines

    @property
    def collectives(self) -> list[Collective]:
        return [c for n in self.nodes for c in n.collectives] + self.unattributed

    def node(self, node_id: int) -> Node | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def _repr_html_(self) -> str | None:
        """Notebooks: the per-op table, charts, device grids and graph picture of this dump (graphpar.viz, through
        the registry of graphpar.ir.notebook)."""
        return html_of(self)


# --- values ---------------------------------------------------------------------------------------------------------
