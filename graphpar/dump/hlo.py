"""Collectives of a compiled XLA program, read from its HLO text and attributed to graph nodes.

Every collective instruction (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute, and their
async ``-start`` forms) is parsed for its kind, result shapes, replica groups and ``op_name`` metadata. The lowering
runs each node under the named scope ``{scope}/{instance}#{id}``, which XLA keeps in ``op_name``; so ``#{id}``
names the node that caused the collective, and a ``transpose(...)`` around it says it belongs to the backward pass.
Replica groups come in three spellings (explicit ``{{0,1},{2,3}}``, iota ``[2,4]<=[8]`` /
``[4,2]<=[2,4]T(1,0)``, and mesh ``mesh['a'=2,'b'=4] {'b'}``); all are expanded to explicit rank lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

_KINDS = {"all-reduce": "AllReduce", "all-gather": "AllGather", "reduce-scatter": "ReduceScatter",
          "all-to-all": "AlltoAll", "collective-permute": "CollectivePermute",
          "collective-broadcast": "Broadcast"}
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+(?P<op>all-reduce|all-gather|"
                    r"reduce-scatter|all-to-all|collective-permute|collective-broadcast)(?:-start)?\(")
_ARRAY = re.compile(r"(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")
_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
             "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_NODE = re.compile(r"([A-Za-z_][\w.\-]*)#(\d+)")


def wire_bytes(kind: str, result_bytes: float, group_size: int) -> float:
    """Bytes one device sends for a collective under ring algorithms: the project's unit of "collective bytes".

    ``kind`` is the MindSpore spelling (AllReduce, AllGather, ReduceScatter, AlltoAll, CollectivePermute,
    Broadcast), ``result_bytes`` the per-device result size R, ``group_size`` g: AllReduce 2(g-1)/g R, AllGather
    (g-1)/g R, ReduceScatter (g-1) R (its input is g R), AlltoAll (g-1)/g R, CollectivePermute and Broadcast R;
    a group of one moves nothing.
    """
    g = int(group_size)
    if g <= 1:
        return 0.0
    if kind == "AllReduce":
        return 2.0 * (g - 1) / g * result_bytes
    if kind in ("AllGather", "AlltoAll"):
        return (g - 1) / g * result_bytes
    if kind == "ReduceScatter":
        return float(g - 1) * result_bytes
    if kind in ("CollectivePermute", "Broadcast"):
        return float(result_bytes)
    raise ValueError(f"wire_bytes: unknown collective kind {kind!r} (expected one of {sorted(set(_KINDS.values()))})")


@dataclass
class Collective:
    """One collective of the compiled program."""

    name: str  # HLO instruction name
    kind: str  # MindSpore spelling: AllReduce, AllGather, ...
    shapes: list[tuple[str, tuple[int, ...]]]  # (hlo dtype, per-device result shape) per result
    groups: list[list[int]]  # device groups (ranks)
    op_name: str
    nodes: list[int] = field(default_factory=list)  # attributed node ids (several when XLA combined them)
    backward: bool = False
    reduce_op: str = ""
    pin: str = ""  # "in0"/"out0": a redistribution of that input/output of the node; "" the op's own collective

    @property
    def nbytes(self) -> int:
        return sum(int(np.prod(shape, dtype=np.int64)) * _ITEMSIZE.get(dt, 4) for dt, shape in self.shapes)

    def group_of(self, rank: int) -> tuple[int, ...]:
        for g in self.groups:
            if rank in g:
                return tuple(g)
        return ()


def _split_braces(text: str) -> list[list[int]]:
    return [[int(x) for x in grp.split(",") if x.strip()] for grp in re.findall(r"\{([\d,\s]*)\}", text)]


def parse_groups(line: str, n_devices: int) -> list[list[int]]:
    m = re.search(r"replica_groups=\{(\{[\d,\s{}]*\})\}", line)
    if m:
        return _split_braces(m.group(1))
    m = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
    if m:
        shape = [int(x) for x in m.group(1).split(",")]
        dims = [int(x) for x in m.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if m.group(3):
            ids = ids.transpose([int(x) for x in m.group(3).split(",")])
        return ids.reshape(shape).tolist()
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if m:
        axes = [(a, int(s)) for a, s in re.findall(r"'([^']+)'=(\d+)", m.group(1))]
        chosen = set(re.findall(r"'([^']+)'", m.group(2)))
        ids = np.arange(int(np.prod([s for _, s in axes]))).reshape([s for _, s in axes])
        keep = [i for i, (a, _) in enumerate(axes) if a not in chosen]
        move = [i for i, (a, _) in enumerate(axes) if a in chosen]
        ids = ids.transpose(keep + move)
        group = int(np.prod([axes[i][1] for i in move])) if move else 1
        return ids.reshape(-1, group).tolist()
    m = re.search(r"source_target_pairs=\{(.*?)\}\s*(?:,|$)", line)
    if m:
        return _split_braces(m.group(1) + "}")
    return [list(range(n_devices))]


def _result_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    out = []
    for m in _ARRAY.finditer(text):
        dims = tuple(int(d) for d in m.group("dims").split(",") if d)
        out.append((m.group("dtype"), dims))
    return out


def parse_collectives(hlo_text: str, n_devices: int) -> list[Collective]:
    """Every collective in ``hlo_text`` (the text of a compiled module), in program order."""
    found = []
    for line in hlo_text.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        op = m.group("op")
        shape_text = m.group("shape")
        if "-start" in line.split("=", 1)[1].split("(")[0]:
            # async start returns (operands..., results...): keep the second half
            shapes = _result_shapes(shape_text)
            shapes = shapes[len(shapes) // 2:] if len(shapes) > 1 else shapes
        else:
            shapes = _result_shapes(shape_text)
        meta = re.search(r'op_name="([^"]*)"', line)
        op_name = meta.group(1) if meta else ""
        nodes = [int(i) for _, i in _NODE.findall(op_name)]
        reduce_op = ""
        if op in ("all-reduce", "reduce-scatter"):
            r = re.search(r"to_apply=%?([\w.\-]+)", line)
            name = r.group(1) if r else ""
            reduce_op = ("max" if "max" in name else "min" if "min" in name else
                         "prod" if "mul" in name else "sum")
        pin = re.search(r"#\d+\)*/(in\d+|out\d+)/", op_name)
        found.append(Collective(m.group("name"), _KINDS[op], shapes, parse_groups(line, n_devices), op_name,
                                list(dict.fromkeys(nodes)), "transpose(" in op_name, reduce_op,
                                pin.group(1) if pin else ""))
    return found
