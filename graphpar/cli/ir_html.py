"""``graphpar ir html DIR -o plan.html [--diff DIR2]``: a self-contained HTML page of IR dumps (graphpar.viz.page);
``graphpar ir explore DIR``: the same dumps in Model Explorer, served on 127.0.0.1 (graphpar.viz.explorer_server)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from graphpar.dump.model import DumpError
from graphpar.viz.plan import PlanView
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


def _explore(args: argparse.Namespace) -> None:
    explorer = PlanView.from_dumps(args.dir, args.index).explore(args.rank, args.port)
    print(f"Model Explorer is serving {', '.join(explorer.graphs)} at\n{explorer.url}\n(127.0.0.1 only; Ctrl+C "
          "stops it)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


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
    p = command("explore", _explore, "open the dumps in Model Explorer (pip install ai-edge-model-explorer): the "
                "graph nested by Cell scope, strategies, layouts and bytes on each op, redistributions on the edges; "
                "served on 127.0.0.1 until Ctrl+C")
    p.add_argument("dir", help="ir_dumps, ir_dumps/rank_R, or one dump file")
    p.add_argument("--index", type=index_type, help="the graph NNNN (default: the newest train graph)")
    p.add_argument("--rank", type=int, help="only rank R (default: every rank, one graph each)")
    p.add_argument("--port", type=int, help="the port on 127.0.0.1 (default: a free one)")
