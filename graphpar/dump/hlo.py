"""Collectives of a compiled XLA program, read from its HLO text and attributed to graph nodes.

Every collective instruction (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute, and their
async ``-start`` forms) is parsed for its kind, result shapes, replica groups and ``op_name`` metadata. The lowering
runs each node under the named scope ``{scope}/{instance}#{id}``, which XLA keeps in ``op_name``; so ``#{id}``
names the node that caused the collective, and a ``transpose(...)`` around it says it belongs to the backward pass
(a node inside a shared group call is named by the call's first node id plus its offset, ``compile.call_groups``).
Replica groups come in the spellings XLA prints (explicit ``{{0,1},{2,3}}``, iota ``[2,4]<=[8]`` /
``[4,2]<=[2,4]T(1,0)``, Shardy's mesh ``mesh['a'=2,'b'=4] {'b'}`` with sub-axes ``{'a':(2)2}`` and
``device_ids=([2,2,2]T(0,2,1))``, and ``source_target_pairs``); all are expanded to explicit rank lists, and an
unknown spelling is an error. An async ``-start``/``-done`` pair is one collective (the start is read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from graphpar.planner.wire import wire_bytes as wire_bytes  # re-exported: the unit the dumps count in

_KINDS = {"all-reduce": "AllReduce", "all-gather": "AllGather", "reduce-scatter": "ReduceScatter",
          "all-to-all": "AlltoAll", "collective-permute": "CollectivePermute",
          "collective-broadcast": "Broadcast"}
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+(?P<op>all-reduce|all-gather|"
                    r"reduce-scatter|all-to-all|collective-permute|collective-broadcast)(?P<start>-start)?\(")
_ARRAY = re.compile(r"(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")
_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
             "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_NODE = re.compile(r"([A-Za-z_][\w.\-]*)#(\d+)")
# a node inside a shared group call (compile.call_groups): the call's first node id, then the member's offset
_GROUP_MEMBER = re.compile(r"graphpar_group\+(\d+)\)*/jit\(graphpar_group\)/(?:[^():]*?/)?[\w.\-]+\+(\d+)(?=[/:)]|$)")
_ATTRIBUTION = re.compile(f"{_GROUP_MEMBER.pattern}|{_NODE.pattern}")  # either, in the order they occur


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


class HloGroupsError(ValueError):
    """A collective whose device groups graphpar cannot read: never guessed as "all ranks"."""

    def __init__(self, instruction: str, text: str):
        self.instruction, self.text = instruction, text
        super().__init__(f"cannot read the device groups of HLO instruction {instruction!r}: unknown spelling "
                         f"{text[:120]!r}; graphpar reads explicit lists {{{{0,1}},{{2,3}}}}, iota [n,m]<=[k] "
                         "(with T(...)), mesh[...] {axes} (with device_ids=...) and source_target_pairs")


_IOTA = re.compile(r"\[(?P<shape>[\d,]+)\]<=\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?")
_MESH = re.compile(r"mesh\[(?P<axes>[^\]]*)\](?:,\s*device_ids=(?P<ids>\((?:[^()]|\([^()]*\))*\)|\[[\d,\s]*\]))?\s*"
                   r"\{(?P<chosen>[^}]*)\}")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _iota(shape: list[int], dims: list[int], perm: list[int] | None) -> np.ndarray:
    ids = np.arange(int(np.prod(dims))).reshape(dims)
    if perm:
        ids = ids.transpose(perm)
    return ids.reshape(shape)


def _explicit(text: str) -> tuple[list[list[int]], int]:
    """``{{0,1},{2,3}}`` (or ``{}``) at the start of ``text``: (groups, characters read)."""
    depth, i = 0, 0
    for i, ch in enumerate(text):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            break
    body = text[1:i]
    groups = [_ints(g) for g in re.findall(r"\{([\d,\s]*)\}", body)]
    if re.sub(r"\{[\d,\s]*\}|[,\s]", "", body):
        raise ValueError(body)
    return groups, i + 1


def _mesh_groups(m: re.Match) -> list[list[int]]:
    """Shardy's ``mesh['a'=2,'b'=4] {'b'}``; sub-axes ``{'a':(2)2}`` (size 2 after a 2-sized major part) and a
    ``device_ids`` order (iota or explicit) included."""
    axes = [(a, int(n)) for a, n in re.findall(r"'([^']+)'=(\d+)", m.group("axes"))]
    total = int(np.prod([n for _, n in axes])) if axes else 1
    ids_text = m.group("ids")
    if ids_text is None:
        ids = np.arange(total)
    elif ids_text.startswith("("):
        inner = ids_text[1:-1]
        it = _IOTA.fullmatch(inner)  # [n]<=[dims]T(perm)
        if it is not None:
            ids = _iota(_ints(it.group("shape")), _ints(it.group("dims")),
                        _ints(it.group("perm")) if it.group("perm") else None).reshape(-1)
        else:  # [dims]T(perm): an iota over dims, transposed
            it = re.fullmatch(r"\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?", inner)
            if it is None:
                raise ValueError(ids_text)
            ids = _iota([total], _ints(it.group("dims")), _ints(it.group("perm")) if it.group("perm") else None)
    else:
        ids = np.asarray(_ints(ids_text[1:-1]))
    # split every axis into the parts the chosen sub-axes name: (pre)size gives [pre, size, rest]
    cuts: dict[str, set[int]] = {a: {1, n} for a, n in axes}
    chosen: list[tuple[str, int, int]] = []  # (axis, pre, size)
    for item in [c.strip() for c in m.group("chosen").split(",") if c.strip()]:
        sub = re.fullmatch(r"'([^']+)'(?::\((\d+)\)(\d+))?", item)
        if sub is None or sub.group(1) not in cuts:
            raise ValueError(item)
        name, size_of = sub.group(1), dict(axes)[sub.group(1)]
        pre, size = (int(sub.group(2)), int(sub.group(3))) if sub.group(2) else (1, size_of)
        cuts[name].update({pre, pre * size})
        chosen.append((name, pre, size))
    parts: list[tuple[str, int, int]] = []  # (axis, pre, size) of every factor, major first
    for a, n in axes:
        points = sorted(cuts[a])
        parts += [(a, lo, hi // lo) for lo, hi in zip(points, points[1:])]
    grid = ids.reshape([size for _, _, size in parts] or [1])
    pick = [k for k, (a, pre, size) in enumerate(parts)
            if any(a == ca and pre >= cpre and pre * size <= cpre * csize for ca, cpre, csize in chosen)]
    keep = [k for k in range(len(parts)) if k not in pick]
    group = int(np.prod([parts[k][2] for k in pick])) if pick else 1
    return grid.transpose(keep + pick).reshape(-1, group).tolist()


def parse_groups(line: str, n_devices: int) -> list[list[int]]:
    """The device groups of one collective instruction, whatever the spelling XLA printed. No ``replica_groups``
    at all means every device (XLA's default); an unknown spelling is a :class:`HloGroupsError`."""
    name = line.split("=", 1)[0].replace("ROOT", "").strip()
    at = line.find("replica_groups=")
    if at < 0:
        m = re.search(r"source_target_pairs=(\{)", line)
        if m:
            try:
                return _explicit(line[m.start(1):])[0]
            except ValueError as exc:
                raise HloGroupsError(name, line[m.start(1):]) from exc
        return [list(range(n_devices))]
    text = line[at + len("replica_groups="):]
    try:
        if text.startswith("{"):
            groups = _explicit(text)[0]
            return groups if groups else [list(range(n_devices))]
        m = _IOTA.match(text)
        if m:
            perm = _ints(m.group("perm")) if m.group("perm") else None
            return _iota(_ints(m.group("shape")), _ints(m.group("dims")), perm).tolist()
        m = _MESH.match(text)
        if m:
            return _mesh_groups(m)
    except ValueError as exc:
        raise HloGroupsError(name, text) from exc
    raise HloGroupsError(name, text)


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
        if m.group("start"):
            # an async start returns (operands..., results..., [u32[] contexts]); its -done is not counted again
            shapes = [(dt, dims) for dt, dims in _result_shapes(shape_text) if dims or dt != "u32"]
            shapes = shapes[len(shapes) // 2:] if len(shapes) > 1 else shapes
        else:
            shapes = _result_shapes(shape_text)
        meta = re.search(r'op_name="([^"]*)"', line)
        op_name = meta.group(1) if meta else ""
        nodes = [int(m.group(1)) + int(m.group(2)) if m.group(1) else int(m.group(4))
                 for m in _ATTRIBUTION.finditer(op_name)]
        reduce_op = ""
        if op in ("all-reduce", "reduce-scatter"):
            r = re.search(r"to_apply=%?([\w.\-]+)", line)
            name = r.group(1) if r else ""
            reduce_op = ("max" if "max" in name else "min" if "min" in name else
                         "prod" if "mul" in name else "sum")
        pin = re.search(r"(?:#\d+\)*/(?:jit\(graphpar_node\)/)?|\+\d+/)(in\d+|out\d+)/", op_name)  # shared: a call
        found.append(Collective(m.group("name"), _KINDS[op], shapes, parse_groups(line, n_devices), op_name,
                                list(dict.fromkeys(nodes)), "transpose(" in op_name, reduce_op,
                                pin.group(1) if pin else ""))
    return found
