"""The Dynamic Cluster scheduler as a program: ``python -m graphpar.launch.scheduler_main`` with MS_ROLE=MS_SCHED.

``graphpar launch --scheduler`` starts this instead of the user's script (MindSpore starts the script itself, whose
``init()`` turns into the scheduler; both work: ``init()`` never returns in the scheduler role).
"""

from __future__ import annotations

from graphpar.communication import init


def main() -> None:
    init()  # serves the workers and exits the process
    raise SystemExit("graphpar scheduler: MS_ROLE=MS_SCHED is not set; nothing to serve")


if __name__ == "__main__":
    main()
