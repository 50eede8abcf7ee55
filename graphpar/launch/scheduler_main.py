"""The Dynamic Cluster scheduler as a program: ``python -m graphpar.launch.scheduler_main`` with MS_ROLE=MS_SCHED.

``graphpar launch --scheduler`` starts this instead of the user's script (MindSpore starts the script itself, whose
``init()`` turns into the scheduler; both work: ``init()`` never returns in the scheduler role). This program runs
no user script, so it never has ``set_ps_context(enable_ssl=True)``: a job with TLS starts its scheduler from the
script (``MS_ROLE=MS_SCHED``), whose workers otherwise fail naming a scheduler that runs without TLS.
"""

from __future__ import annotations

from graphpar.communication import init


def main() -> None:
    init()  # serves the workers and exits the process
    raise SystemExit("graphpar scheduler: MS_ROLE=MS_SCHED is not set; nothing to serve")


if __name__ == "__main__":
    main()
