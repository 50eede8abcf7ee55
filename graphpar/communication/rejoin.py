"""A Dynamic Cluster worker rejoining its job after a peer died (``MS_ENABLE_RECOVERY=1``).

JAX cannot take a restarted process back into a running ``jax.distributed`` job: the coordination service admits
each of its ``num_processes`` tasks once and a missed heartbeat makes JAX abort the survivors; the experimental
``jax_enable_recoverability`` flag only keeps the coordination service alive, while the survivors' XLA backend and
its collective communicators (gloo on CPU, NCCL on GPU) stay bound to the original peers, with no public API to
re-create them. So recovery forms the job again: when a worker dies the scheduler tells every survivor to ``restart``;
each replaces itself with a fresh copy of the same command (``os.execv``: same pid, same environment, so the same
``MS_NODE_ID``) and registers again; the dead worker, restarted by hand (or by ``graphpar launch``) with its
``MS_NODE_ID``, registers too; the scheduler forms a new job generation, and every worker's ``Model.train`` rolls
back to the newest complete checkpoint (``graphpar.checkpoint.recovery``).

MindSpore's scheduler refuses a node id for 30 s after its worker died (against network jitter and malicious
re-registration). graphpar's knows when a worker is gone (its connection closed), so a worker restarted with the
same ``MS_NODE_ID`` is accepted as soon as the scheduler has noticed the death, without waiting; while the old
process is still connected the new one is refused, naming the holder of the id.
"""

from __future__ import annotations

import os
import sys
import threading

restart_requested = threading.Event()


def reexec(reason: str) -> None:
    """Replace this process by a fresh run of the same command line (it registers with the scheduler again)."""
    restart_requested.set()
    sys.stderr.write(f"graphpar: {reason}; restarting this worker to rejoin the job (MS_ENABLE_RECOVERY)\n")
    sys.stderr.flush()
    sys.stdout.flush()
    argv = [sys.executable] + list(getattr(sys, "orig_argv", [sys.executable] + sys.argv))[1:]
    os.execv(sys.executable, argv)


def wait_for_restart(seconds: float) -> None:
    """Called when this worker is about to exit after an error: give the scheduler's ``restart`` a moment to
    arrive (the error is usually the dead peer's broken collective), so the worker rejoins instead of exiting."""
    restart_requested.wait(seconds)
