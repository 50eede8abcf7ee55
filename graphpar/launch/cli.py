"""``graphpar launch [options] COMMAND...``: the command-line front of ``graphpar.launch``.

Both spellings are accepted: ``--nproc N --devices-per-proc K`` and msrun's ``--worker_num``,
``--local_worker_num``, ``--master_addr``, ``--master_port``, ``--node_rank``, ``--log_dir``, ``--join``,
``--cluster_time_out``; plus ``--hostfile`` (``HOST slots=N`` lines), ``--max-restarts`` and ``--early-exit-grace``.
COMMAND is a program with its arguments (``python train.py --lr 0.1``) or a script path (run with this Python).
"""

from __future__ import annotations

import argparse
import sys

from graphpar.launch.config import LaunchError, resolve
from graphpar.launch.hostfile import HostfileError
from graphpar.launch.supervisor import Supervisor

_EPILOG = """examples:
  graphpar launch --nproc 2 --devices-per-proc 4 python train.py          one node, 2 processes x 4 devices
  graphpar launch --worker_num 16 --local_worker_num 8 --master_addr 10.0.0.1 --master_port 8118 \\
                  --node_rank 0 python train.py                           node 0 of 2 (node 1: --node_rank 1)
  graphpar launch --hostfile hosts --devices-per-proc 1 train.py          same command on every host in 'hosts'
  graphpar launch --scheduler --nproc 2 python train.py                   Dynamic Cluster: MS_* variables + scheduler
see docs/distributed.md"""


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "launch", help="start and supervise the processes of a (multi-process) job on this node",
        description="Start the local processes of a job, stream rank 0's output, stop everything when one fails.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--nproc", type=int, help="processes on this node (same as --local_worker_num; default 1)")
    add("--local_worker_num", type=int, help="msrun spelling of --nproc")
    add("--devices-per-proc", dest="devices_per_proc", type=int,
        help="devices each process drives (on CPU: simulated with XLA_FLAGS); default: JAX's default")
    add("--worker_num", type=int, help="processes in the whole job, all nodes (default: this node's count)")
    add("--master_addr", help="address of process 0 / the scheduler (default 127.0.0.1)")
    add("--master_port", type=int, help="port of the JAX coordinator / scheduler (default: free port on one node, "
        "8118 across nodes)")
    add("--node_rank", type=int, default=None, help="index of this node (default 0 on one node; -1: let the "
        "Dynamic Cluster scheduler assign ranks)")
    add("--hostfile", help="mpirun host file ('HOST slots=N' per line): the job's nodes and process counts")
    add("--log_dir", help="directory for worker_{i}.log and scheduler.log (default graphpar_logs)")
    add("--join", type=_bool, nargs="?", const=True, default=True,
        help="accepted for msrun compatibility: graphpar launch always waits for its processes")
    add("--cluster_time_out", type=int, default=None, help="seconds to wait for every process to join (default: "
        "GRAPHPAR_CLUSTER_TIMEOUT or MS_TOPO_TIMEOUT when set, else 600)")
    add("--early-exit-grace", "--early_exit_grace", dest="early_exit_grace", type=float, default=None,
        metavar="SECONDS", help="a worker that ends its script cleanly while the others still run after SECONDS "
        "left the job early: stop the job naming it (default 60, or GRAPHPAR_EARLY_EXIT_GRACE; negative: no limit)")
    add("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=None,
        help="restart all local workers up to K times after a failure; they resume from the newest complete "
             "checkpoint (default 0, or 3 when MS_ENABLE_RECOVERY=1)")
    add("--scheduler", action="store_true", help="Dynamic Cluster mode, and run the scheduler on this node")
    add("--dynamic-cluster", dest="dynamic_cluster", action="store_true",
        help="Dynamic Cluster mode with the scheduler on another node (at --master_addr:--master_port)")
    add("command", nargs=argparse.REMAINDER, help="program and arguments, or a script path")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        config = resolve(args)
        return Supervisor(config).run()
    except (LaunchError, HostfileError) as exc:
        print(f"graphpar launch: error: {exc}", file=sys.stderr)
        return 2
