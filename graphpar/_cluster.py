"""This process's membership of a multi-process job: which launcher convention its environment speaks, whether it
has joined that job yet, and its place among the processes of its host.

It sits below the settings (``graphpar._context``) because ``set_context(device_target=..., device_id=...)``
checks the devices of this machine only once the job has formed (no JAX backend may start before
``jax.distributed.initialize``), and it reads nothing but the environment (``graphpar._env``). Joining the job is
``graphpar.communication.bootstrap``'s work; it records the outcome here with :func:`record_join`.
"""

from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass

import jax

from graphpar import _env


@dataclass(frozen=True)
class HostPlacement:
    """This process's place among the processes of its host (for ``get_local_rank``)."""

    local_process_id: int = 0
    local_process_count: int = 1


_placement = HostPlacement()
_joined = False


def placement() -> HostPlacement:
    return _placement


def joined() -> bool:
    """Whether this process has joined a multi-process job (through ``graphpar.communication.init``)."""
    return _joined


def record_join(where: HostPlacement) -> None:
    """Note that this process joined its job, at ``where`` on its host (``graphpar.communication.bootstrap``)."""
    global _joined, _placement
    _joined = True
    _placement = where
    note = _env.exit_note_path()
    if note is not None:
        atexit.register(_note_exit, note)


def _note_exit(path: str) -> None:
    """Tell ``graphpar launch`` that this worker's script has ended, before JAX's own exit handler runs.

    A worker that leaves a JAX job does not exit: JAX's exit handler waits in a shutdown barrier for every other
    process, up to 300 s, while they wait for it in their next collective; then JAX aborts them all. The launcher
    cannot tell this from a busy worker by looking at its process, so the worker writes ``ended`` (or ``raised
    <exception>`` after an uncaught one) to ``path`` here. Exit handlers run last-registered first and JAX
    registers its handler when it is imported, before any join, so this one runs first.
    """
    # sys.last_value exists only after an uncaught exception (Python sets it before running the exit handlers).
    raised = vars(sys).get("last_value")
    text = "ended" if raised is None else f"raised {type(raised).__name__}: {raised}".splitlines()[0]
    try:
        with open(path, "w") as out:
            out.write(text)
    except OSError:
        pass  # the launcher is gone or its directory too: nobody to tell


def convention(env: _env.ClusterEnv) -> str | None:
    """Which launcher convention the environment speaks, in graphpar's order of precedence, or None (one
    process)."""
    if env.present("GRAPHPAR_NUM_PROCESSES") or env.present("GRAPHPAR_PROCESS_ID"):
        return "launch"
    if env.ms_role is not None:
        return "dynamic_cluster"
    if env.present("OMPI_COMM_WORLD_SIZE"):
        return "openmpi"
    if (env.slurm_ntasks is not None and env.slurm_ntasks > 1) or "SLURM_NTASKS" in env.invalid:
        return "slurm"
    if (env.rank_size is not None and env.rank_size > 1) or "RANK_SIZE" in env.invalid:
        return "rank_table"
    return None


def cluster_pending() -> bool:
    """True when the environment describes a multi-process job that this process has not joined yet.

    Until it has, no JAX backend may start (``jax.distributed.initialize`` refuses to run afterwards), so code that
    would touch devices early (``set_context(device_target=...)`` checking the platform) defers to ``init()``.
    """
    if _joined or jax.distributed.is_initialized():
        return False
    return convention(_env.cluster_env()) is not None
