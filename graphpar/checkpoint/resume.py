"""Resuming ``Model.train`` from a training checkpoint: which one, and putting its state back.

A training checkpoint (written by ``ModelCheckpoint``) holds every variable of the train network (Parameters,
BatchNorm statistics, Dropout keys), the optimizer's state (including its step count, which drives learning-rate
schedules) and the progress: ``step`` (the callbacks' ``cur_step_num``), ``epoch`` and ``batch_num``. Data pipelines
are pure functions of (seed, epoch, position), so the progress also says where the data resumes: global batch
``step % batch_num`` of epoch ``step // batch_num``. Restoring the state exactly and feeding the same batches makes
the continuation bitwise identical to a run that never stopped.

Values are read whole on every process and put where the train step's plan wants them at its next call, so a
checkpoint resumes under any plan or device count.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any, Protocol

import jax

from graphpar._logging import notice_once
from graphpar.checkpoint import directory as ckpt_dir
from graphpar.checkpoint import manifest, recovery, replacing, store
from graphpar.checkpoint.entries import assign, load_optimizer, network_variables, optimizer_of
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.serialization import checkpoint_path, read_manifest, whole_arrays


class SavesCheckpoints(Protocol):
    """Where a ``ModelCheckpoint`` callback writes (``graphpar.train`` defines the callback, a layer above this one:
    resuming reads only its directory and prefix)."""

    @property
    def directory(self) -> str: ...

    @property
    def prefix(self) -> str: ...


def _found(cbs: Sequence[SavesCheckpoints]) -> tuple[list[tuple[float, str, dict]], list[tuple[str, str]]]:
    """The checkpoints a rollback may choose from, newest first: those of the callbacks' prefix families in their
    directories, and the one MS_RECOVERY_PATH's record names; plus ``(path, reason)`` of those whose manifest is
    damaged."""
    readable: dict[str, tuple[float, str, dict]] = {}
    damaged: dict[str, str] = {}
    for directory, prefix in sorted({(cb.directory, cb.prefix) for cb in cbs}):
        good, bad = ckpt_dir.readable_checkpoints(directory, prefix)
        readable.update((path, item) for item in good for path in [os.path.abspath(item[1])])
        damaged.update((os.path.abspath(path), reason) for path, reason in bad)
    recorded = recovery.recorded_checkpoint()
    if recorded and os.path.abspath(recorded) not in readable and \
            os.path.exists(os.path.join(recorded, manifest.MANIFEST)):
        try:
            body = manifest.read(recorded)
            readable[os.path.abspath(recorded)] = (float(body.get("saved_at", 0.0)), os.path.abspath(recorded), body)
        except CheckpointError as exc:
            damaged[os.path.abspath(recorded)] = exc.reason
    newest_first = sorted(readable.values(), key=lambda item: (item[0], item[1]), reverse=True)
    return newest_first, sorted(damaged.items())


def _intact(path: str, body: dict) -> bool:
    """Whether every file of checkpoint ``path`` matches its manifest; a damaged one is named with its fault."""
    try:
        manifest.verify(replacing.committed(path), body)  # an interrupted replacement: its committed half
        return True
    except CheckpointError as exc:
        notice_once(f"resume-damaged:{path}", f"resume: skipping {path}: {exc.path}: {exc.reason}; trying the next "
                    "older checkpoint", logging.WARNING)
        return False


def _pick(cbs: Sequence[SavesCheckpoints], job: str | None) -> tuple[str, list[tuple[str, str | None]]]:
    """The newest intact checkpoint (of ``job`` when given), and ``(path, job)`` of the checkpoints of other jobs
    it passed over. Damaged ones are named and skipped: one flipped byte must not block a rollback when older intact
    checkpoints exist."""
    newest_first, damaged = _found(cbs)
    for path, reason in damaged:
        notice_once(f"resume-manifest:{path}", f"resume: skipping {path}: {reason}", logging.WARNING)
    foreign: list[tuple[str, str | None]] = []
    for _, path, body in newest_first:
        if job is not None and body.get("job") != job:
            foreign.append((path, body.get("job")))
        elif _intact(path, body):
            return path, foreign
    return "", foreign


def _say_what_was_lost(cbs: Sequence[SavesCheckpoints], chosen: str, job: str | None,
                       foreign: list[tuple[str, str | None]]) -> None:
    """One line when a rollback cannot use the newest save: none complete (training starts over), only other runs'
    checkpoints (this job starts over), or a newer save was still being written when the job stopped (its steps are
    trained again). Names the directory and the save."""
    directories = sorted({cb.directory for cb in cbs})
    unfinished = [item for cb in cbs for item in ckpt_dir.unfinished_saves(cb.directory, cb.prefix)]
    chosen_time = os.path.getmtime(chosen) if chosen and os.path.exists(chosen) else 0.0
    newer = sorted(p for t, p in unfinished if not chosen or t >= chosen_time)
    where = ", ".join(directories) or "(no ModelCheckpoint directory)"
    lost = (f"; the newest save, {newer[-1]}, was still in flight when the job stopped and is incomplete"
            if newer else "")
    if not chosen and foreign:
        other, other_job = foreign[0]
        notice_once(f"resume-foreign:{where}", f"resume: {where} holds no checkpoint of this job ({job}), only "
                    f"{len(foreign)} of other runs (the newest, {other}, of job {other_job or 'unknown'}), which a "
                    f"rollback never resumes{lost}; training starts from step 0", logging.WARNING)
    elif not chosen:
        notice_once(f"resume-none:{where}", f"resume: no complete checkpoint in {where}{lost}; training starts from the "
                    "beginning", logging.WARNING)
    elif newer:
        notice_once(f"resume-lost:{chosen}", f"resume: rolling back to {chosen}{lost}", logging.WARNING)


def choose(resume: Any, cbs: Sequence[SavesCheckpoints]) -> str | None:
    """The checkpoint to resume from (process 0 decides, every process gets its answer), or None for a fresh
    start. ``resume``: False (only automatic recovery), True (newest of the ModelCheckpoint callbacks'), or a path;
    ``cbs``: the ModelCheckpoint callbacks of the ``Model.train`` call.

    A rollback (a restart, a recovery) takes only this job's checkpoints (``recovery.job_id``): never another run's.
    ``resume=True`` is the user asking to continue the training in that directory, so it takes the newest intact
    checkpoint whichever run wrote it. Either way damaged checkpoints are named and passed over."""
    if resume not in (False, None, True) and not isinstance(resume, (str, os.PathLike)):
        raise TypeError(f"Model.train(resume={resume!r}): expected False, True or a checkpoint path")
    if isinstance(resume, (str, os.PathLike)):
        chosen = os.path.abspath(checkpoint_path(os.fspath(resume), must_exist=True))
        store.read_manifest(chosen, verify=False)  # a clear error now if it is missing or incomplete
        return chosen
    if resume is True and not cbs:
        raise ValueError("Model.train(resume=True): resume from what? Pass a ModelCheckpoint callback (its "
                         "directory holds the checkpoints) or resume='path/to/CKP-1_4.ckpt'")
    if resume is not True and not recovery.may_roll_back():
        return None  # (decided alike on every process: it depends on the environment only)
    chosen = ""
    if jax.process_index() == 0 and (resume is True or recovery.should_roll_back()):
        # checkpoints are written into process 0's directory, and process 0 decides for the job
        job = None if resume is True else recovery.job_id()
        chosen, foreign = _pick(cbs, job)
        _say_what_was_lost(cbs, chosen, job, foreign)
    chosen = store.broadcast_text(chosen)
    return chosen or None


def restore(train_network: Any, path: str) -> dict:
    """Put the checkpoint's state into ``train_network`` (and its optimizer); returns its training progress, with
    ``checkpoint``: ``path`` (a ModelCheckpoint resumed in its own directory keeps writing under its prefix)."""
    path, body, _ = read_manifest(path)  # a rank's view resumes its checkpoint: this process drives every rank
    progress = body.get("train")
    if not progress:
        raise CheckpointError(path, "it is not a training checkpoint (no progress recorded: it was written by "
                              "save_checkpoint, not ModelCheckpoint)", "Load it with load_checkpoint + "
                              "load_param_into_net and train with initial_epoch instead")
    arrays = whole_arrays(path, body, ("network", "optimizer"))
    network = arrays["network"]
    variables = network_variables(train_network)
    missing = [name for name, _ in variables if name not in network]
    if missing:
        raise CheckpointError(path, f"it has no value for {missing[:5]}{' ...' if len(missing) > 5 else ''} of "
                              "this network", "Resume with the network the checkpoint was saved from")
    for name, holder in variables:
        assign(holder, name, network[name], True, f"resume from {path}")
    optimizer = optimizer_of(train_network)
    if optimizer is not None:
        if not arrays["optimizer"]:
            raise CheckpointError(path, "it holds no optimizer state", "Resume from a checkpoint written by "
                                  "ModelCheckpoint during Model.train")
        load_optimizer(optimizer, arrays["optimizer"], f"resume from {path}", train_network)
    notice_once(f"resumed:{path}", f"resuming from {path} (epoch {progress['epoch']}, step {progress['step']})",
                logging.INFO)
    return {**progress, "checkpoint": path}


def training_finished() -> None:
    """``Model.train`` ended normally: a later start of this job is a fresh one (see ``recovery``)."""
    store.wait_for_saves()
    if jax.process_index() == 0:
        recovery.finished()
