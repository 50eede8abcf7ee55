"""MindSpore's disaster recovery switches (``MS_ENABLE_RECOVERY``, ``MS_RECOVERY_PATH``) and graphpar's launcher
restarts, as one question: should this training run roll back to a checkpoint, and to which?

MindSpore persists "the training's intermediate state" under ``MS_RECOVERY_PATH``. graphpar persists one small file
there, ``graphpar_recovery.json``, written by process 0 after every committed checkpoint (its path and step) and
removed when training finishes. A run rolls back when

* it is a restart by ``graphpar launch --max-restarts`` (``GRAPHPAR_RESTART_COUNT > 0``), or
* ``MS_ENABLE_RECOVERY=1`` and the recovery file exists (the previous run of this job did not finish), or
* ``MS_ENABLE_RECOVERY=1`` without ``MS_RECOVERY_PATH`` (then every start resumes from the newest checkpoint of the
  ``ModelCheckpoint`` directory, as a worker restarted by hand expects);

and it rolls back to the newest intact checkpoint **of this job** among the recovery file's and the
``ModelCheckpoint`` callbacks' directories.

A job's identity (:func:`job_id`) is stamped into every checkpoint ``ModelCheckpoint`` writes, so that a restart
never rolls back into another run's checkpoint (a previous, finished run in the same directory: its restart would
otherwise "resume" that run's final state, train nothing and exit 0). The identity is ``GRAPHPAR_JOB_ID``, which
``graphpar launch`` (and ``msrun``, run by it) sets once per launch and every restart inherits; under ``mpirun`` the
Open MPI / PMIx job id; under SLURM the job id. A job started by hand (Dynamic Cluster workers, a plain ``python``)
has none unless ``GRAPHPAR_JOB_ID`` is set to one value for all its workers: MindSpore keys its recovery on
``MS_RECOVERY_PATH`` alone, and so does graphpar then (its record says whether a start is a recovery).
"""

from __future__ import annotations

import json
import os

from graphpar import _env

RECORD = "graphpar_recovery.json"


def job_id() -> str | None:
    """This job's identity (see the module docstring), or None when the launcher gives none."""
    env = _env.cluster_env()
    if env.job_id:
        return env.job_id
    if env.ompi_job_id:
        return f"mpirun:{env.ompi_job_id}"
    if env.slurm_job_id is not None:
        return f"slurm:{env.slurm_job_id}"
    return None


def _record_path() -> str | None:
    env = _env.cluster_env()
    if not env.ms_enable_recovery or not env.ms_recovery_path:
        return None
    return os.path.join(env.ms_recovery_path, RECORD)


def may_roll_back() -> bool:
    """Whether this run could be a rollback at all (the launcher restarted it, or recovery is on)."""
    env = _env.cluster_env()
    return env.restart_count > 0 or env.ms_enable_recovery


def should_roll_back() -> bool:
    env = _env.cluster_env()
    if env.restart_count > 0:
        return True
    if not env.ms_enable_recovery:
        return False
    path = _record_path()
    return path is None or os.path.exists(path)


def record(checkpoint: str, progress: dict) -> None:
    """Note ``checkpoint`` as the one to roll back to (process 0, after its commit; a no-op unless recovery is on)."""
    path = _record_path()
    if path is None:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump({"checkpoint": os.path.abspath(checkpoint), **progress}, fh)
    os.replace(tmp, path)


def recorded_checkpoint() -> str | None:
    path = _record_path()
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path) as fh:
            return json.load(fh).get("checkpoint")
    except (OSError, ValueError):
        return None


def finished() -> None:
    """Training ended normally: the next start of the job is a fresh one."""
    path = _record_path()
    if path is not None and os.path.exists(path):
        os.remove(path)
