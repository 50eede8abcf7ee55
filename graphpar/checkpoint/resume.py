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
from graphpar.checkpoint import recovery, store
from graphpar.checkpoint.entries import assign, load_optimizer, network_variables, optimizer_of
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.serialization import checkpoint_path, whole_arrays


class SavesCheckpoints(Protocol):
    """Where a ``ModelCheckpoint`` callback writes (``graphpar.train`` defines the callback, a layer above this one:
    resuming reads only its directory and prefix)."""

    @property
    def directory(self) -> str: ...

    @property
    def prefix(self) -> str: ...


def _newest(candidates: list[str]) -> str | None:
    """The most recently committed of the complete checkpoints among ``candidates``."""
    best = None
    for path in candidates:
        try:
            saved_at = float(store.read_manifest(path, verify=False).get("saved_at", 0.0))
        except CheckpointError:
            continue
        if best is None or saved_at > best[0]:
            best = (saved_at, os.path.abspath(path))
    return best[1] if best else None


def _say_what_was_lost(cbs: Sequence[SavesCheckpoints], chosen: str) -> None:
    """One line when a rollback cannot use the newest save: none complete (training starts over), or a newer save
    was still being written when the job stopped (its steps are trained again). Names the directory and the save."""
    directories = sorted({cb.directory for cb in cbs})
    unfinished = [(os.path.getmtime(p) if os.path.exists(p) else 0.0, p) for cb in cbs
                  for p in ckpt_dir.unfinished_saves(cb.directory, cb.prefix)]
    chosen_time = os.path.getmtime(chosen) if chosen and os.path.exists(chosen) else 0.0
    newer = sorted(p for t, p in unfinished if not chosen or t >= chosen_time)
    where = ", ".join(directories) or "(no ModelCheckpoint directory)"
    lost = (f"; the newest save, {newer[-1]}, was still in flight when the job stopped and is incomplete"
            if newer else "")
    if not chosen:
        notice_once(f"resume-none:{where}", f"resume: no complete checkpoint in {where}{lost}; training starts from the "
                    "beginning", logging.WARNING)
    elif newer:
        notice_once(f"resume-lost:{chosen}", f"resume: rolling back to {chosen}{lost}", logging.WARNING)


def choose(resume: Any, cbs: Sequence[SavesCheckpoints]) -> str | None:
    """The checkpoint to resume from (process 0 decides, every process gets its answer), or None for a fresh
    start. ``resume``: False (only automatic recovery), True (newest of the ModelCheckpoint callbacks'), or a path;
    ``cbs``: the ModelCheckpoint callbacks of the ``Model.train`` call."""
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
        candidates = [p for cb in cbs if (p := ckpt_dir.latest_checkpoint(cb.directory, cb.prefix))]
        recorded = recovery.recorded_checkpoint()
        if recorded:
            candidates.append(recorded)
        chosen = _newest(candidates) or ""
        _say_what_was_lost(cbs, chosen)
    chosen = store.broadcast_text(chosen)
    return chosen or None


def restore(train_network: Any, path: str) -> dict:
    """Put the checkpoint's state into ``train_network`` (and its optimizer); returns its training progress."""
    body = store.read_manifest(path)
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
                logging.WARNING)
    return progress


def training_finished() -> None:
    """``Model.train`` ended normally: a later start of this job is a fresh one (see ``recovery``)."""
    store.wait_for_saves()
    if jax.process_index() == 0:
        recovery.finished()
