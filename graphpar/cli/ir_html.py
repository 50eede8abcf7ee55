"""``graphpar ir html DIR -o plan.html [--diff DIR2]``: a self-contained HTML page of IR dumps (graphpar.viz.page)."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphpar.dump.model import DumpError
from graphpar.viz.page import diff_page, dump_page


def _html(args: argparse.Namespace) -> None:
    text = (diff_page(args.dir, args.diff, args.index, args.rank) if args.diff
            else dump_page(args.dir, args.index, args.rank))
    out = Path(args.output)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise DumpError(out, f"cannot write the page: {exc.strerror}") from None
    print(f"wrote {out} ({len(text) // 1024} KiB)")


def add_html_command(command, index_type) -> None:
    """Register ``html`` with ``graphpar ir``'s ``command(name, fn, help)`` helper."""
    p = command("html", _html, "one self-contained HTML page (no network) of every graph and rank in DIR: per-op "
                "tables, device grids, collective-byte charts, the graph with layout changes marked; --diff DIR2 "
                "compares two plans")
    p.add_argument("dir", help="ir_dumps, ir_dumps/rank_R, or one dump file")
    p.add_argument("-o", "--output", default="plan.html", help="the page to write (default: plan.html)")
    p.add_argument("--diff", metavar="DIR2", help="a second dump directory: write a diff page (A = DIR, B = DIR2)")
    p.add_argument("--index", type=index_type, help="only the graph NNNN (with --diff: the graph to compare, "
                   "default the newest train graph)")
    p.add_argument("--rank", type=int, help="only rank R (with --diff: the rank to compare, default the lowest)")
