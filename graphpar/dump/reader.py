"""Reader of graphpar's MindSpore-style IR dumps: the line grammar, text -> :class:`Dump` (directories: loading.py).

Reads every line ``graphpar.dump.writer`` writes (the grammar is in docs/ir_format.md): the ``# key: value``
header, the ``# inputs`` section, op node lines, collective lines (execute dumps), ``# parameter conflict:``
lines, ``return`` and the per-step byte total. A line it cannot parse raises :class:`DumpError` naming the file and
line; ``#`` comment lines it does not know are kept in :attr:`Dump.comments` (forward compatibility).
Standard library only, so ``graphpar ir`` reads dumps without starting JAX.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from graphpar.dump.model import (  # noqa: F401  (re-exported: the reader's public names)
    FORMAT_VERSION, Collective, Dump, DumpError, Input, Node, ParameterConflict, Provenance, TensorType,
    layout_text, strategy_text)


def parse_tuple(text: str) -> tuple:
    """Nested integer tuples, every parenthesis a tuple (``(8)`` is ``(8,)``, MindSpore's spelling)."""
    tokens = re.findall(r"\(|\)|,|-?\d+|\S", text)
    pos = 0

    def item() -> Any:
        nonlocal pos
        tok = tokens[pos] if pos < len(tokens) else ""
        pos += 1
        if tok == "(":
            out = []
            while pos < len(tokens) and tokens[pos] != ")":
                out.append(item())
                if pos < len(tokens) and tokens[pos] == ",":
                    pos += 1
            if pos >= len(tokens):
                raise ValueError(f"unclosed '(' in {text!r}")
            pos += 1
            return tuple(out)
        if re.fullmatch(r"-?\d+", tok):
            return int(tok)
        raise ValueError(f"unexpected {tok!r} in {text!r}")

    value = item()
    if pos != len(tokens) or not isinstance(value, tuple):
        raise ValueError(f"not a tuple: {text!r}")
    return value


def parse_value(text: str) -> Any:
    """An attribute value: bool, None, int, float, integer tuple; anything else stays a string."""
    if text in ("true", "false"):
        return text == "true"
    if text == "None":
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)(e[-+]?\d+)?|-?inf|nan", text):
        return float(text)
    if text.startswith("(") and re.fullmatch(r"[\d\s(),-]*", text):
        try:
            return parse_tuple(text)
        except ValueError:
            return text
    return text


def parse_layout(text: str) -> tuple[tuple[str, ...], ...]:
    """``(m0, m1.m2)`` / ``(-,)`` / ``()`` -> mesh axes per dimension."""
    if not (text.startswith("(") and text.endswith(")")):
        raise ValueError(f"bad layout {text!r}")
    body = text[1:-1].strip().rstrip(",")
    if not body:
        return ()
    dims = [d.strip() for d in body.split(",")]
    if not all(d == "-" or re.fullmatch(r"[\w]+(\.[\w]+)*", d) for d in dims):
        raise ValueError(f"bad layout {text!r}")
    return tuple(() if d == "-" else tuple(d.split(".")) for d in dims)


_TYPE = re.compile(r"<Tensor\[(?P<dtype>[^\]]*)\], \((?P<shape>[\d, ]*)\)>")


def parse_types(text: str) -> list[TensorType]:
    """``<Tensor[Float32], (8, 8)>, <Tensor[Float32], ()>`` -> tensor types (``""`` -> [])."""
    found = list(_TYPE.finditer(text))
    if ", ".join(m.group(0) for m in found) != text:
        raise ValueError(f"bad tensor types {text!r}")
    return [TensorType(m.group("dtype"), tuple(int(d) for d in m.group("shape").replace(",", " ").split()))
            for m in found]


def split_attrs(text: str) -> dict[str, Any]:
    """``transpose_a: false, in_strategy: ((2, 4), (4, 1))`` -> dict; commas inside brackets do not split."""
    if not text.strip():
        return {}
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and text.startswith(", ", i) and re.match(r", [A-Za-z_][\w.]*: ", text[i:]):
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    if depth != 0:  # an unbalanced string value: split on keys alone
        parts = re.split(r", (?=[A-Za-z_][\w.]*: )", text)
    attrs = {}
    for part in parts:
        key, sep, value = part.partition(": ")
        if not sep or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            raise ValueError(f"bad attribute {part!r}")
        attrs[key] = parse_value(value)
    return attrs


_PROPAGATED = re.compile(r"^propagated from (?P<name>.+) \(node (?P<id>\d+)\) at cost (?P<cost>\S+) B$")


_BREAKDOWN = re.compile(r" \[cost (?P<items>(?:[a-z_]+=\S+ ?)+)\]$")


def parse_provenance(text: str) -> Provenance:
    full, breakdown = text, None
    m = _BREAKDOWN.search(text)
    if m:
        breakdown = {k: float(v) for k, v in (item.split("=", 1) for item in m.group("items").split())}
        text = text[:m.start()]
    m = _PROPAGATED.match(text)
    if m:
        return Provenance("propagated", int(m.group("id")), m.group("name"), float(m.group("cost")), text=full,
                          breakdown=breakdown)
    m = re.match(r"^propagated at cost (\S+) B$", text)
    if m:
        return Provenance("propagated", cost=float(m.group(1)), text=full, breakdown=breakdown)
    kind, _, detail = text.partition(": ")
    if not re.fullmatch(r"[a-z_]+", kind):
        raise ValueError(f"bad provenance {full!r}")
    return Provenance(kind, detail=detail, text=full, breakdown=breakdown)


# --- lines ----------------------------------------------------------------------------------------------------------
_INPUT = re.compile(r"^(?P<name>%\S+) = (?P<role>\w+)\(\) : (?P<type><Tensor\[[^\]]*\], \([\d, ]*\)>)"
                    r"  # layout: (?P<layout>\([^)]*\))  # split: (?P<split>\([\d, ]*\))$")
_NODE_HEAD = re.compile(r"^(?P<outs>(?:%[^\s(]*)?)\((?P<tag>[^)]*)\) = (?P<kind>[^\s(]+)\((?P<args>[^)]*)\) "
                        r"\{instance name: (?P<inst>[^}]*)\} primitive_attrs: \{")
_COLL_HEAD = re.compile(r"^(?P<name>%c\d+) = (?P<kind>\w+)\((?P<args>[^)]*)\) "
                        r"\{instance name: (?P<inst>[^}]*)\} primitive_attrs: \{")
_TRAILER = re.compile(r"  # (scope|node|provenance|device_matrix|in_layouts|out_layouts|predicted_bytes): ")
_CONFLICT = re.compile(r"^# parameter conflict: (?P<param>.+) stored as (?P<stored>\([^)]*\)); wanted by "
                       r"(?P<wanted>.*); redistribution (?P<cost>\S+) B per device$")
_WANTED = re.compile(r"(?P<name>\S+) \(node (?P<id>\d+)\) as (?P<layout>\([^)]*\))")
_TOTAL = re.compile(r"^# total collective bytes per step \(rank (?P<rank>\d+)\): (?P<total>\d+)"
                    r"(?:  # wire: (?P<wire>\S+)  # predicted: (?P<predicted>\S+))?$")


def _split_main(text: str) -> tuple[str, str, str, dict[str, str]]:
    """``ATTRS} [{in_strategy: S}] : (IN) -> (OUT)  # k: v ...`` -> (attrs-and-strategy, ins, outs, trailers)."""
    cut = _TRAILER.search(text)
    if cut is None:
        raise ValueError("missing '  # scope: (...)  # node: N' trailer")
    main, trailer = text[:cut.start()], text[cut.start():]
    pieces = _TRAILER.split(trailer)
    trailers = dict(zip(pieces[1::2], pieces[2::2]))
    arrow = main.rfind(") -> (")
    colon = main.rfind(" : (", 0, arrow)
    if arrow < 0 or colon < 0 or not main.endswith(")"):
        raise ValueError("missing ' : (input types) -> (output types)'")
    return main[:colon], main[colon + 4:arrow], main[arrow + 6:-1], trailers


def _scope(trailers: dict[str, str]) -> str:
    scope = trailers.get("scope", "()")
    if not (scope.startswith("(") and scope.endswith(")")):
        raise ValueError(f"bad scope {scope!r}")
    return scope[1:-1]


def _node_id(trailers: dict[str, str], allow_none: bool) -> int | None:
    text = trailers.get("node", "")
    if text.isdigit():
        return int(text)
    if text == "-" and allow_none:
        return None
    raise ValueError(f"bad or missing '# node: N' ({text!r})")


def parse_node(line: str, lineno: int) -> Node:
    head = _NODE_HEAD.match(line)
    if head is None:
        raise ValueError("expected '%N(out) = Kind(args) {instance name: ...} primitive_attrs: {...} ...'")
    rest, ins, outs, trailers = _split_main(line[head.end():])
    m = re.match(r"^(?P<attrs>.*)\} \{in_strategy: (?P<strategy>[\d(), ]*)\}$", rest)
    attrs_text, strategy = (m.group("attrs"), parse_tuple(m.group("strategy"))) if m else (rest[:-1], None)
    if not m and not rest.endswith("}"):
        raise ValueError("primitive_attrs {...} not closed")
    layouts = trailers.get("in_layouts", "")
    out_layouts = trailers.get("out_layouts", "")
    dm = trailers.get("device_matrix")
    return Node(id=_node_id(trailers, allow_none=False), outputs=[o for o in head.group("outs").split(",") if o],
                kind=head.group("kind"), instance_name=head.group("inst"),
                args=[a.strip() for a in head.group("args").split(",") if a.strip()],
                primitive_attrs=split_attrs(attrs_text), in_strategy=strategy, input_types=parse_types(ins),
                output_types=parse_types(outs), scope=_scope(trailers),
                provenance=parse_provenance(trailers["provenance"]) if "provenance" in trailers else None,
                device_matrix=parse_tuple(dm) if dm is not None else None,
                in_layouts=[parse_layout(t) for t in layouts.split("; ")] if layouts else [], line=lineno,
                out_layouts=[parse_layout(t) for t in out_layouts.split("; ")] if out_layouts else [],
                predicted_bytes=float(trailers["predicted_bytes"]) if "predicted_bytes" in trailers else None)


def parse_collective(line: str, lineno: int) -> Collective:
    head = _COLL_HEAD.match(line)
    if head is None:
        raise ValueError("expected '%cK = Kind(arg) {instance name: ...} primitive_attrs: {...} ...'")
    rest, ins, outs, trailers = _split_main(line[head.end():])
    if not rest.endswith("}"):
        raise ValueError("primitive_attrs {...} not closed")
    attrs = split_attrs(rest[:-1])
    group = attrs.get("rank_list", ())
    group = (group,) if isinstance(group, int) else group
    if not isinstance(attrs.get("bytes"), int) or not isinstance(group, tuple):
        raise ValueError("a collective needs integer 'bytes' and a 'rank_list' tuple")
    return Collective(name=head.group("name"), kind=head.group("kind"), arg=head.group("args").strip(),
                      instance_name=head.group("inst"), attrs=attrs, op=attrs.get("op"), group=group,
                      bytes=attrs["bytes"], pass_=str(attrs.get("pass", "")), cause=str(attrs.get("cause", "")),
                      wire_bytes=float(attrs["wire_bytes"]) if "wire_bytes" in attrs else None,
                      parameters=tuple(str(attrs.get("parameters", "")).split()),
                      hlo=str(attrs.get("hlo", "")), input_types=parse_types(ins), output_types=parse_types(outs),
                      scope=_scope(trailers), node=_node_id(trailers, allow_none=True), line=lineno)


def parse_input(line: str, lineno: int) -> Input:
    m = _INPUT.match(line)
    if m is None:
        raise ValueError("expected '%name = Role() : <Tensor[..], (..)>  # layout: (..)  # split: (..)'")
    return Input(m.group("name"), m.group("role"), parse_types(m.group("type"))[0], parse_layout(m.group("layout")),
                 parse_tuple(m.group("split")), lineno)


def parse_conflict(line: str, lineno: int) -> ParameterConflict:
    m = _CONFLICT.match(line)
    if m is None:
        raise ValueError("expected '# parameter conflict: P stored as (..); wanted by ...; redistribution N B "
                         "per device'")
    wanted = [(w.group("name"), int(w.group("id")), parse_layout(w.group("layout")))
              for w in _WANTED.finditer(m.group("wanted"))]
    return ParameterConflict(m.group("param"), parse_layout(m.group("stored")), wanted, float(m.group("cost")),
                             lineno)


def _apply_header(dump: Dump, key: str, value: str) -> None:
    dump.header[key] = value
    if key in ("graph", "parallel_mode"):  # "# graph: G  purpose: P", "# parallel_mode: M  search_mode: S"
        first, *more = value.split("  ")
        dump.header[key] = first
        dump.header.update(chunk.partition(": ")[::2] for chunk in more)
        dump.graph, dump.purpose = dump.header.get("graph", ""), dump.header.get("purpose", "")
        dump.parallel_mode, dump.search_mode = dump.header.get("parallel_mode", ""), dump.header.get("search_mode", "")
    elif key == "rank":
        m = re.match(r"^(\d+) of (\d+)", value)
        if m is None:
            raise ValueError(f"expected '# rank: R of N', got {value!r}")
        dump.rank, dump.n_ranks = int(m.group(1)), int(m.group(2))
    elif key == "mesh":
        pairs = [p.partition("=") for p in value.split()]
        if not all(s.isdigit() for _, _, s in pairs):
            raise ValueError(f"expected '# mesh: name=size ...', got {value!r}")
        dump.mesh = {n: int(s) for n, _, s in pairs}
    elif key == "passes":
        for item in value.split():
            name, _, ms = item.partition("=")
            dump.passes[name] = float(ms.removesuffix("ms"))
    elif key == "format":
        m = re.fullmatch(r"graphpar-ir (\d+)", value)
        if m is None:
            raise ValueError(f"expected '# format: graphpar-ir N', got {value!r}")
        dump.format_version = int(m.group(1))
        if dump.format_version > FORMAT_VERSION:
            raise ValueError(f"format {dump.format_version} is newer than this reader ({FORMAT_VERSION}); "
                             "upgrade graphpar")


def parse_text(text: str, path: str | Path = "<text>") -> Dump:
    """Parse the text of one dump; ``path`` names it in errors."""
    lines = text.splitlines()
    first = re.match(r"^# graphpar IR dump: (\S+)$", lines[0]) if lines else None
    if first is None:
        raise DumpError(path, "not a graphpar IR dump (line 1 should be '# graphpar IR dump: KIND')", 1)
    dump = Dump(str(path), first.group(1), None, {})
    in_header, last_node = True, None
    for lineno, line in enumerate(lines[1:], start=2):
        try:
            if not line.strip():
                in_header = False
            elif in_header and (m := re.match(r"^# (\w+): ?(.*)$", line)):
                _apply_header(dump, m.group(1), m.group(2))
            elif line.startswith("#"):
                in_header = False
                if line.startswith("# parameter conflict:"):
                    dump.conflicts.append(parse_conflict(line, lineno))
                elif line.startswith("# total collective bytes per step"):
                    m = _TOTAL.match(line)
                    if m is None:
                        raise ValueError("expected '# total collective bytes per step (rank R): N'")
                    dump.total_bytes = int(m.group("total"))
                    if m.group("wire") is not None:
                        dump.total_wire_bytes = float(m.group("wire"))
                        dump.total_predicted_bytes = float(m.group("predicted"))
                elif line == "# inputs" or line.startswith(("# collectives not attributed to an op",
                                                            "# gradient reductions")):
                    last_node = None
                else:
                    dump.comments.append((lineno, line))
            elif line.startswith("return"):
                in_header = False
                if not re.fullmatch(r"return( %\S+(, %\S+)*)?", line.rstrip()):
                    raise ValueError("expected 'return %a, %b'")
                dump.returns = [r.strip() for r in line[len("return"):].split(",") if r.strip()]
            elif re.match(r"^%\S+ = \w+\(\) : ", line):
                in_header = False
                dump.inputs.append(parse_input(line, lineno))
            elif re.match(r"^%c\d+ = ", line):
                in_header = False
                coll = parse_collective(line, lineno)
                if coll.node is not None and last_node is not None and last_node.id == coll.node:
                    last_node.collectives.append(coll)
                elif coll.node is not None and (owner := dump.node(coll.node)) is not None:
                    owner.collectives.append(coll)
                else:
                    dump.unattributed.append(coll)
            elif line.startswith(("%", "(out) = ")):
                in_header = False
                last_node = parse_node(line, lineno)
                dump.nodes.append(last_node)
            else:
                raise ValueError("not a header, input, node, collective or return line")
        except ValueError as exc:
            excerpt = line if len(line) <= 100 else line[:97] + "..."
            raise DumpError(path, f"cannot parse: {exc}\n    {excerpt}", lineno) from None
    return dump


def read_dump(path: str | Path) -> Dump:
    """Parse the dump file at ``path``."""
    p = Path(path)
    if not p.exists():
        raise DumpError(path, "no such file")
    if p.is_dir():
        raise DumpError(path, "is a directory, expected a .ir dump file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DumpError(path, "not a text file (graphpar IR dumps are UTF-8 text)") from None
    except OSError as exc:
        raise DumpError(path, f"cannot read: {exc.strerror}") from None
    return parse_text(text, path)

