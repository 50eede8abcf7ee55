"""``graphpar plan``: plan a training script for N devices without them.

    graphpar plan SCRIPT --devices N [ARGS...]          the script's own arguments follow it
    graphpar plan --devices N SCRIPT [ARGS...]
    graphpar plan --devices N -- SCRIPT [ARGS...]       everything after ``--`` is the script's
    graphpar plan SCRIPT --devices N -- [ARGS...]

Without ``--``, graphpar plan's own options (``--devices``, ``--all``, ``--json``, ...) are taken wherever they
stand and every other token after the script is the script's; a script with an option of the same name puts its
arguments after ``--``.

The script runs as ``python SCRIPT`` would, on this machine's devices, until its first compiled step: that step is
traced and planned for N virtual devices (``graphpar.compile.plans.dry_run``), the plan summary is printed
(strategies, predicted per-device memory and collective bytes per step; ``--all`` every op, ``--json`` as JSON,
``--dump DIR`` rank 0's begin dump for ``graphpar ir``), and the script ends there. The parallel mode and search
mode are the script's own unless ``--parallel-mode`` / ``--search-mode`` override them (a STAND_ALONE script is
searched as AUTO_PARALLEL would; a DATA_PARALLEL one is shown with data-parallel strategies).
"""

from __future__ import annotations

import argparse
import os
import sys

from graphpar.compile.plans.dry_run import DryRunRequest, plan_script
from graphpar.errors import GraphparError

# graphpar plan's own options and whether each takes a value: what canonical_argv lifts out of a script's arguments
_OWN_OPTIONS = {"--devices": True, "--parallel-mode": True, "--search-mode": True, "--platform": True,
                "--dump": True, "--all": False, "--json": False, "-h": False, "--help": False}


def _own(token: str) -> tuple[bool, bool]:
    """(is one of graphpar plan's options, takes a separate value)."""
    name, eq, _ = token.partition("=")
    if name in _OWN_OPTIONS:
        return True, _OWN_OPTIONS[name] and not eq
    return False, False


def canonical_argv(tokens: list[str]) -> list[str]:
    """``graphpar plan``'s arguments in its one unambiguous form, ``[OPTIONS...] -- SCRIPT [ARGS...]``, from any of
    the documented forms (the module docstring): argparse alone gives a script named before the options no
    arguments of its own, and refuses options after it."""
    if "--" in tokens:
        cut = tokens.index("--")
        before, after = tokens[:cut], tokens[cut + 1:]
    else:
        before, after = tokens, None
    own: list[str] = []
    script: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(before):
        token = before[i]
        is_own, takes_value = _own(token)
        if is_own:
            own += before[i:i + 2] if takes_value else [token]
            i += 2 if takes_value else 1
        elif not script and not token.startswith("-"):
            script = [token]
            i += 1
        elif script and after is None:
            rest.append(token)  # the script's own argument (no "--": every unknown token after the script)
            i += 1
        else:
            own.append(token)  # an unknown option before the script: argparse names it
            i += 1
    if after is not None:
        rest = after if script else after[1:]
        script = script or after[:1]
    return own + ["--"] + script + rest


def _devices(text: str) -> int:
    value = int(text.replace(",", "").replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"--devices must be >= 1, got {text}")
    return value


def _run(args: argparse.Namespace) -> int:
    if args.script is None:
        raise SystemExit("graphpar plan: name the training script: graphpar plan SCRIPT --devices N")
    if not os.path.isfile(args.script):
        raise SystemExit(f"graphpar plan: no such script: {args.script}")
    request = DryRunRequest(args.devices, args.platform, args.parallel_mode, args.search_mode)
    try:
        summary = plan_script(args.script, args.args, request)
    except GraphparError as exc:  # the script's strategies do not fit N devices, a bad setting: one line, no trace
        sys.stdout.flush()
        print(f"graphpar plan: {args.script} on {args.devices} devices: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    if summary is None:
        raise SystemExit(f"graphpar plan: {args.script} finished without compiling a step; plan what it trains "
                         "with graphpar.parallel.plan_for_devices(net_with_loss, *inputs, devices=N) instead")
    print(summary.to_json() if args.json else summary.text(max_rows=None if args.all else 60), flush=True)
    if args.dump:
        for path in summary.write_dump(args.dump):
            print(f"graphpar plan: wrote {path} (graphpar ir summary|explain|html {path.parent})",
                  file=sys.stderr if args.json else sys.stdout, flush=True)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plan", help="plan a training script for N devices this machine does not have",
                              description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--devices", type=_devices, required=True, help="the device count to plan for, e.g. 1024")
    p.add_argument("--parallel-mode", choices=("semi_auto_parallel", "auto_parallel", "data_parallel"),
                   help="override the script's parallel_mode")
    p.add_argument("--search-mode", choices=("recursive_programming", "dynamic_programming", "sharding_propagation"),
                   help="override the script's search_mode")
    p.add_argument("--platform", choices=("gpu", "tpu", "cpu"), default="gpu",
                   help="the hardware the cost model prices (default gpu)")
    p.add_argument("--all", action="store_true", help="list every op (default: the first 60)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    p.add_argument("--dump", metavar="DIR", help="write rank 0's step_parallel_begin dump of the plan under DIR/rank_0 "
                                                 "(read it with graphpar ir summary|explain|html)")
    p.add_argument("script", nargs="?", help="the training script (run until its first compiled step)")
    p.add_argument("args", nargs="*", help="arguments passed to the script")
    p.set_defaults(func=_run)


__all__ = ["register", "canonical_argv"]
