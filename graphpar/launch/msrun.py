"""``msrun``: MindSpore 2.x's launcher command line, run by ``graphpar launch``.

``msrun --worker_num 8 --local_worker_num 8 --master_addr 127.0.0.1 --master_port 8118 --node_rank -1 --log_dir .
--join False --cluster_time_out 600 train.py ARGS`` with msrun's defaults (those values). What each option becomes:

* ``--worker_num`` / ``--local_worker_num``: the job's and this node's process counts (one device each unless the
  script's platform gives a process several, as a CPU process with ``XLA_FLAGS`` device counts does);
* ``--master_addr`` / ``--master_port``: where process 0's coordinator listens (msrun's scheduler address);
* ``--node_rank``: this node's index; -1 on one node means node 0, across nodes the Dynamic Cluster scheduler
  assigns the ranks (as msrun does);
* ``--log_dir``: ``worker_{rank}.log`` and ``scheduler.log`` go there;
* ``--join``: True waits for the job and returns its status (``graphpar launch``'s behaviour); False (msrun's
  default) starts the job detached from the terminal and returns at once, as msrun does; the launcher's own output
  then goes to ``{log_dir}/msrun.log``;
* ``--cluster_time_out``: seconds the processes wait for each other to join.

Supervision and restarts (``MS_ENABLE_RECOVERY``) are ``graphpar launch``'s (see ``graphpar.launch.supervisor``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from graphpar.launch.cli import _bool
from graphpar.launch.config import LaunchError, check_listen_address_here, resolve
from graphpar.launch.hostfile import HostfileError
from graphpar.launch.logs import prepare_log_dir
from graphpar.launch.supervisor import Supervisor

DEFAULTS = {"worker_num": 8, "local_worker_num": 8, "master_addr": "127.0.0.1", "master_port": 8118,
            "node_rank": -1, "log_dir": ".", "join": False, "cluster_time_out": 600}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="msrun", description="MindSpore's msrun command line, run by graphpar launch "
                                "(see docs/distributed.md)")
    add = p.add_argument
    add("--worker_num", type=int, default=DEFAULTS["worker_num"], help="processes in the whole job (default 8)")
    add("--local_worker_num", type=int, default=DEFAULTS["local_worker_num"],
        help="processes on this node (default 8)")
    add("--master_addr", default=DEFAULTS["master_addr"], help="address of process 0 (default 127.0.0.1)")
    add("--master_port", type=int, default=DEFAULTS["master_port"], help="coordinator port (default 8118)")
    add("--node_rank", type=int, default=DEFAULTS["node_rank"], help="index of this node (default -1)")
    add("--log_dir", default=DEFAULTS["log_dir"], help="directory of worker_{rank}.log (default: .)")
    add("--join", type=_bool, nargs="?", const=True, default=DEFAULTS["join"],
        help="wait for the job to finish (default False: start it detached and return)")
    add("--cluster_time_out", type=int, default=DEFAULTS["cluster_time_out"],
        help="seconds to wait for every process to join (default 600)")
    add("task_script", help="the training script")
    add("task_script_args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def launch_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """The ``graphpar launch`` arguments that ``args`` (msrun's) mean."""
    if not 1024 <= args.master_port <= 65535:
        raise LaunchError(f"msrun: --master_port {args.master_port} is out of range; valid: 1024..65535")
    single_node = args.local_worker_num == args.worker_num
    return argparse.Namespace(
        nproc=args.local_worker_num, local_worker_num=None, devices_per_proc=None, worker_num=args.worker_num,
        master_addr=args.master_addr, master_port=args.master_port,
        node_rank=0 if single_node else args.node_rank,  # msrun ignores node_rank on one node
        hostfile=None, log_dir=args.log_dir, join=True, cluster_time_out=args.cluster_time_out,
        max_restarts=None, early_exit_grace=None, scheduler=False, dynamic_cluster=False,
        command=[args.task_script, *args.task_script_args])


def _detach(args: argparse.Namespace) -> int:
    """Start this same command with ``--join True`` in a new session, its output in ``log_dir/msrun.log``."""
    log_dir = args.log_dir
    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, "msrun.log")
    options = [f"--{name}={getattr(args, name)}" for name in DEFAULTS if name != "join"]
    with open(log_path, "ab") as log:
        child = subprocess.Popen([sys.executable, "-m", "graphpar.launch.msrun", *options, "--join=True",
                                  args.task_script, *args.task_script_args],
                                 stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    print(f"msrun: started the job in the background (pid {child.pid}, --join False); logs in {log_dir}/ "
          f"(worker_*.log; the launcher's own in {log_path})", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    try:
        config = resolve(launch_arguments(args))
        if not args.join:  # the detached launcher checks these too, but its errors would go to msrun.log
            prepare_log_dir(config.log_dir)
            check_listen_address_here(config)
            return _detach(args)
        return Supervisor(config).run()
    except (LaunchError, HostfileError) as exc:
        print(f"msrun: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
