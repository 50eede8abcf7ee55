"""``graphpar ir show|summary|diff|explain``: read IR dumps back (docs/ir_format.md).

Each command builds one JSON-able dict (``graphpar.dump.views``: what ``--json`` prints, keys stable) and renders it
as tables (``graphpar.viz.text``): ``rich`` tables on a terminal, plain aligned text otherwise. This module only
parses the arguments and prints. An unreadable file, directory or op is reported as ``path:line: reason`` on stderr
with exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from graphpar.cli.ir_html import add_html_command
from graphpar.dump.loading import load
from graphpar.dump.model import DumpError
from graphpar.dump.reader import read_dump
from graphpar.dump.views import diff_data, explain_data, show_data, summary_data
from graphpar.planner.stages.report import FILE, PIPELINE, explain_text
from graphpar.viz.explorer_server import ExplorerError
from graphpar.viz.text import print_diff, print_explain, print_show, print_summary


# --- commands -------------------------------------------------------------------------------------------------------
def _out(args: argparse.Namespace, data: dict[str, Any], render) -> None:
    if args.json:
        print(_dumps(data))
    else:
        render(data)


def _dumps(data: dict[str, Any]) -> str:
    """Indented JSON with innermost arrays (shapes, strategy rows, groups) kept on one line."""
    text = json.dumps(data, indent=2)
    return re.sub(r"\[\s*([^\[\]{}\"]*?)\s*\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)


def _show(args: argparse.Namespace) -> None:
    _out(args, show_data(read_dump(args.file)), lambda d: print_show(d, args.wide))


def _summary(args: argparse.Namespace) -> None:
    _out(args, summary_data(load(args.dir, args.index, args.rank)), lambda d: print_summary(d, args.wide))


def _diff(args: argparse.Namespace) -> None:
    data = diff_data(load(args.a, args.index, args.rank), load(args.b, args.index, args.rank))
    _out(args, data, lambda d: print_diff(d, args.all))


def _explain(args: argparse.Namespace) -> None:
    if args.op == PIPELINE:
        _out(args, _pipeline_search(args.dir, args.rank), lambda d: print(explain_text(d)))
        return
    _out(args, explain_data(load(args.dir, args.index, args.rank), args.op), print_explain)


def _pipeline_search(where: str, rank: int | None) -> dict[str, Any]:
    """The stage search ``graphpar plan --dump DIR`` wrote beside the begin dump (DIR, DIR/rank_R or a file in
    it)."""
    base = Path(where)
    base = base.parent if base.is_file() else base
    for folder in (base, base / f"rank_{rank or 0}"):
        if (folder / FILE).is_file():
            return json.loads((folder / FILE).read_text())
    raise DumpError(where, f"no {FILE} for 'graphpar ir explain DIR {PIPELINE}'; graphpar plan SCRIPT --devices N "
                    "--dump DIR writes it when the script sets auto_pipeline=True in AUTO_PARALLEL")


def _run(command):
    def run(args: argparse.Namespace) -> int:
        try:
            command(args)
        except (DumpError, ExplorerError) as exc:
            sys.stdout.flush()
            print(exc, file=sys.stderr)
            return 2
        except BrokenPipeError:
            sys.stderr.close()  # `graphpar ir show x.ir | head`: the reader went away
        return 0
    return run


def _index(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected the NNNN counter of a dump file name, got {text!r}")
    return int(text)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``graphpar ir ...`` to the ``graphpar`` command."""
    ir = subparsers.add_parser("ir", help="inspect IR dumps (save_graphs)", description="Read graphpar's IR dumps "
                               "(ir_dumps/rank_R/step_parallel_begin_NNNN.ir, NN_execute_NNNN.ir). DIR is a rank "
                               "directory, or ir_dumps itself (then rank 0, or --rank R). In a directory the newest "
                               "train graph is used unless --index NNNN. See docs/ir_format.md.")
    sub = ir.add_subparsers(dest="ir_command", metavar="{show,summary,diff,explain,html,explore}")
    ir.set_defaults(func=lambda args: ir.print_help() or 2)

    def command(name: str, fn, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.set_defaults(func=_run(fn))
        return p

    def selection(p: argparse.ArgumentParser) -> None:
        p.add_argument("--index", type=_index, help="the graph counter NNNN to read (default: newest train graph)")
        p.add_argument("--rank", type=int, help="the rank directory to read when given ir_dumps/ (default: lowest)")
        p.add_argument("--json", action="store_true", help="print machine-readable JSON (stable keys)")

    p = command("show", _show, "parse one dump file and print its inputs, nodes, collectives and totals")
    p.add_argument("file", help="a step_parallel_begin_NNNN.ir or NN_execute_NNNN.ir file")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON (stable keys)")
    p.add_argument("--wide", action="store_true", help="one line per node with its scope in a column, nothing "
                   "wrapped (default: the nodes under their Cell scope, long cells wrapped)")
    p = command("summary", _summary, "one row per op: strategy, provenance, per-device shapes, collectives, "
                "bytes; and the total collective bytes per step")
    p.add_argument("dir", help="ir_dumps/rank_R, ir_dumps, or one dump file")
    p.add_argument("--wide", action="store_true", help="one line per op with its scope in a column, nothing "
                   "wrapped, every parameter of a gradient reduction (about 300 columns for a GPT; default: the "
                   "ops under their Cell scope, long cells wrapped, about 210)")
    selection(p)
    p = command("diff", _diff, "two plans side by side: ops whose strategy changed and the change in collective "
                "bytes")
    p.add_argument("a", help="dump file or directory (plan A)")
    p.add_argument("b", help="dump file or directory (plan B)")
    p.add_argument("--all", action="store_true", help="list unchanged ops too")
    selection(p)
    p = command("explain", _explain, "the provenance chain from an op back to the user hint its strategy came "
                "from, with the edge costs")
    p.add_argument("dir", help="ir_dumps/rank_R, ir_dumps, or one dump file")
    p.add_argument("op", help="an instance name (matmul2), SCOPE/instance, or node:N; 'pipeline': the stage search's "
                              "chosen plan against its runners-up (graphpar plan --dump of an auto_pipeline script)")
    selection(p)
    add_html_command(command, _index)
