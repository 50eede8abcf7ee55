"""``graphpar plan SCRIPT --devices N``, or with the script's own arguments ``graphpar plan --devices N -- SCRIPT
ARGS...``: plan a training script for N devices without them (arguments after the script are taken as its own only
behind ``--``: argparse gives a script named before the options no arguments of its own).

The script runs as ``python SCRIPT`` would, on this machine's devices, until its first compiled step: that step is
traced and planned for N virtual devices (``graphpar.compile.plans.dry_run``), the plan summary is printed
(strategies, predicted per-device memory and collective bytes per step), and the script ends there. The parallel
mode and search mode are the script's own unless ``--parallel-mode`` / ``--search-mode`` override them (a
STAND_ALONE script is searched as AUTO_PARALLEL would; a DATA_PARALLEL one is shown with data-parallel strategies).
"""

from __future__ import annotations

import argparse
import os
import sys

from graphpar.compile.plans.dry_run import DryRunRequest, plan_script
from graphpar.errors import GraphparError


def _devices(text: str) -> int:
    value = int(text.replace(",", "").replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"--devices must be >= 1, got {text}")
    return value


def _run(args: argparse.Namespace) -> int:
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
    if summary is not None:
        return 0
    raise SystemExit(f"graphpar plan: {args.script} finished without compiling a step; plan what it trains with "
                     "graphpar.parallel.plan_for_devices(net_with_loss, *inputs, devices=N) instead")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plan", help="plan a training script for N devices this machine does not have",
                              description=__doc__.split("\n\n")[1])
    p.add_argument("script", help="the training script (run until its first compiled step)")
    p.add_argument("--devices", type=_devices, required=True, help="the device count to plan for, e.g. 1024")
    p.add_argument("--parallel-mode", choices=("semi_auto_parallel", "auto_parallel", "data_parallel"),
                   help="override the script's parallel_mode")
    p.add_argument("--search-mode", choices=("recursive_programming", "dynamic_programming", "sharding_propagation"),
                   help="override the script's search_mode")
    p.add_argument("--platform", choices=("gpu", "tpu", "cpu"), default="gpu",
                   help="the hardware the cost model prices (default gpu)")
    p.add_argument("args", nargs="*", help="arguments passed to the script (graphpar plan --devices N -- SCRIPT ARGS)")
    p.set_defaults(func=_run)


__all__ = ["register"]
