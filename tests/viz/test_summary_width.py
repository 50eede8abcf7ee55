"""``graphpar ir summary`` of the 2-layer GPT's dumps reads in about 210 columns (it printed 302): the ops under a
line naming their Cell scope, long cells folded between their parts, and nothing lost against ``--wide``, the
one-line-per-op form with the scope in a column."""

from __future__ import annotations

import re

from graphpar.cli.main import main as cli

COLUMNS = ["node", "op", "kind", "strategy", "provenance", "per-device shapes", "collectives", "bytes", "measured",
           "predicted", "scope"]


def _summary(capsys, dumps, *flags: str) -> str:
    capsys.readouterr()
    assert cli(["ir", "summary", str(dumps / "rank_0"), *flags]) == 0
    return capsys.readouterr().out


def _rows(text: str) -> list[tuple[str | None, dict[str, str]]]:
    """(the scope line above it, {column: its text without white space}) per row of the op table, each column cut
    at the header's offsets and a row's continuation lines joined to it."""
    lines = text.splitlines()
    top = next(k for k, line in enumerate(lines) if line.startswith("node  op"))
    names = [c for c in COLUMNS if c in re.split(r"\s{2,}", lines[top])]
    starts = [lines[top].index(c) for c in names] + [None]
    rows, heading = [], None
    for line in lines[top + 1:]:
        if not line.strip():
            break
        if line.startswith(("scope ", "collectives of no op")):
            heading = line
            continue
        cells = [line[a:b] for a, b in zip(starts, starts[1:])]
        if cells[0].strip():
            rows.append((heading, {n: "" for n in names}))
        for name, cell in zip(names, cells):
            rows[-1][1][name] += "".join(cell.split())
    return rows


def test_the_summary_reads_in_about_210_columns_and_loses_nothing_against_wide(gpt_plan, capsys):
    """(conftest's gpt_plan: the 2-layer GPT compiled on 8 devices, dp=2 x mp=4, with its dumps)"""
    _, dumps = gpt_plan
    text, wide = _summary(capsys, dumps), _summary(capsys, dumps, "--wide")
    width = max(len(line) for line in text.splitlines())
    assert 180 <= width <= 230 < max(len(line) for line in wide.splitlines())
    folded, flat = _rows(text), _rows(wide)
    ops = [(h, r) for h, r in folded if r["node"] != "-"]
    assert len(ops) == len([r for _, r in flat if r["node"] != "-"]) == 68
    for (heading, row), (_, whole) in zip(ops, flat):
        # the same text in every column, folded or not (SoftmaxCrossEntropy / WithLogits: one kind), and the
        # scope column's value on the line above the op
        assert row == {k: v for k, v in whole.items() if k != "scope"}
        assert heading == f"scope {whole['scope']}:"
    # the gradient reductions' rows: one line each in --wide, with every Parameter they carry
    reductions = [r for h, r in folded if r["node"] == "-"]
    assert reductions and all(h.startswith("collectives of no op") for h, r in folded if r["node"] == "-")
    assert [r["collectives"] for r in reductions] == [r["collectives"] for _, r in flat if r["node"] == "-"]
    assert "--wideor--jsonlistsall" in "".join(r["provenance"] for r in reductions)
    assert "blocks.1.output.projection.weight" in wide
