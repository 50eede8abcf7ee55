"""The search's lines in the begin dump, and reading them back.

After the node lines, one line per searched op and one summary line (readers that do not know them keep them as
comments, so older tools still read the dump)::

    # search: node 4 chosen ((1, 1), (4, 1)) {comm_bytes: 3072, messages: 2, flops: 1.57e+06, memory_bytes: 9216, time: 5.4e-05}; alternative ((8, 1), (1, 1)) {...}; alternative ((2, 1), (4, 1)) {...}
    # search summary: {objective_s: 0.00127, memory_bytes: 1.62e+06, budget: None, optimal: True, ...}

A choice's cost is this op's own collectives and compute under that strategy plus the redistributions on its edges,
every other op kept as planned; ``time`` is ``Cost.time()`` on the hardware the search used.
"""

from __future__ import annotations

import re
from typing import Any

from graphpar.ir.graph import Graph

_LINE = re.compile(r"^# search: node (?P<id>\d+) (?P<rest>chosen .*)$")
_CHOICE = re.compile(r"(?P<role>chosen|alternative) (?P<strategy>\((?:[^{}])*\)) \{(?P<cost>[^{}]*)\}")
_SUMMARY = re.compile(r"^# search summary: \{(?P<body>.*)\}$")


def _number(value: float) -> str:
    return f"{value:.6g}"


def _cost_text(cost: Any, time: float) -> str:
    parts = [f"{k}: {_number(float(v))}" for k, v in cost.as_dict().items()]
    return "{" + ", ".join(parts + [f"time: {_number(time)}"]) + "}"


def _strategy_text(strategy: tuple) -> str:
    return "(" + ", ".join("(" + ", ".join(str(d) for d in row) + ")" for row in strategy) + ")"


def search_lines(graph: Graph) -> list[str]:
    """The dump lines of ``graph.plan.search`` (none when the plan was not searched)."""
    searched = graph.plan.search
    if searched is None:
        return []
    lines = []
    for nid in graph.order:
        record = searched.records.get(nid)
        if record is None:
            continue
        parts = [f"chosen {_strategy_text(record.chosen.strategy)} {_cost_text(record.chosen.cost, record.chosen.time)}"]
        parts += [f"alternative {_strategy_text(a.strategy)} {_cost_text(a.cost, a.time)}"
                  for a in record.alternatives]
        lines.append(f"# search: node {nid} " + "; ".join(parts))
    summary = searched.summary()
    lines.append("# search summary: {" + ", ".join(
        f"{k}: {_number(v) if isinstance(v, float) else v}" for k, v in summary.items()) + "}")
    return lines


def _value(text: str) -> Any:
    text = text.strip()
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def _fields(body: str) -> dict[str, Any]:
    return {k.strip(): _value(v) for k, _, v in (item.partition(": ") for item in body.split(", ") if item)}


def _strategy(text: str) -> tuple:
    rows = re.findall(r"\(([\d, ]*)\)", text[1:-1])
    return tuple(tuple(int(d) for d in row.split(",") if d.strip()) for row in rows)


def parse_search_line(line: str) -> tuple[int, dict[str, Any]] | None:
    """``(node id, {"chosen": {...}, "alternatives": [...]})`` of a ``# search: node N ...`` line, else None."""
    m = _LINE.match(line)
    if m is None:
        return None
    choices = [{"strategy": _strategy(c.group("strategy")), "cost": _fields(c.group("cost"))}
               for c in _CHOICE.finditer(m.group("rest"))]
    roles = [c.group("role") for c in _CHOICE.finditer(m.group("rest"))]
    if not choices or roles[0] != "chosen":
        raise ValueError(f"bad search line {line!r}")
    return int(m.group("id")), {"chosen": choices[0], "alternatives": choices[1:]}


def parse_summary_line(line: str) -> dict[str, Any] | None:
    m = _SUMMARY.match(line)
    return _fields(m.group("body")) if m else None


def search_records(dump: Any) -> tuple[dict[int, dict[str, Any]], dict[str, Any] | None]:
    """The search records and summary of a parsed dump (``graphpar.dump.model.Dump``; read from its comments)."""
    records, summary = {}, None
    for _, line in dump.comments:
        parsed = parse_search_line(line)
        if parsed is not None:
            records[parsed[0]] = parsed[1]
        elif summary is None:
            summary = parse_summary_line(line)
    return records, summary


def print_choices(record: dict[str, Any]) -> None:
    """``graphpar ir explain``'s table of a searched op: its strategy and the best two alternatives, costed."""
    keys = ("time", "comm_bytes", "messages", "flops", "memory_bytes")
    rows = [("chosen", record["chosen"])] + [(f"alternative {k + 1}", a) for k, a in enumerate(record["alternatives"])]
    table = [["", "strategy", "time (s)", "collective B", "messages", "FLOPs", "memory B"]]
    for role, choice in rows:
        cost = choice["cost"]
        table.append([role, _strategy_text(choice["strategy"])] + [_number(float(cost.get(k, 0.0))) for k in keys])
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    print("\nsearched (each choice priced with every other op as planned):")
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
