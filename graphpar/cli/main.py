"""The ``graphpar`` command: ``graphpar ir ...`` (inspect IR dumps) and ``graphpar launch ...`` (start a job).

Each subcommand lives in its own module with a ``register(subparsers)`` function; this file only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from graphpar._version import __version__
from graphpar.cli.plan import canonical_argv

_SUBCOMMANDS = ("graphpar.cli.ir", "graphpar.launch.cli", "graphpar.cli.plan")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphpar", description="graphpar: MindSpore-style parallel training on "
                                     "JAX. Subcommands: ir (inspect IR dumps), launch (start a multi-process job), plan (plan a script for N devices).")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.set_defaults(func=None)  # a subcommand sets its own
    sub = parser.add_subparsers(dest="command")
    for name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not name.startswith(exc.name or "\0"):
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plan"]:  # a script's own arguments ride along: put them in argparse's one unambiguous form
        argv = ["plan"] + canonical_argv(argv[1:])
    args = parser.parse_args(argv)
    if args.version:
        print(f"graphpar {__version__}")
        return 0
    if args.func is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
