"""``CheckpointConfig`` and ``ModelCheckpoint``: MindSpore's checkpoint policy and callback.

The policy is MindSpore's: save every ``save_checkpoint_steps`` steps (else every ``save_checkpoint_seconds``), keep
the ``keep_checkpoint_max`` newest (else one per ``keep_checkpoint_per_n_minutes``), and save the last step when
training ends. Each checkpoint is the directory ``{directory}/{prefix}-{epoch}_{step}.ckpt`` (``step`` within the
epoch) holding the train network's Parameters and state, the optimizer's state, and the training progress, so that
``Model.train(..., resume=True)`` continues from it (``checkpoint.resume`` reads the directories of the
:func:`checkpoint_callbacks` of a ``Model.train`` call).

A fresh run in a directory that already holds checkpoints of its prefix writes under ``{prefix}_1`` (``_2``, ...)
as MindSpore does, and leaves the earlier run's checkpoints alone; a run that resumed from a checkpoint of that
directory, or a restart of the same job (``recovery.job_id``), keeps writing under the prefix it resumed or wrote.
One job at a time writes a directory + prefix (``checkpoint.writer_lock``): a second one is refused by name.

One deliberate difference: old checkpoints are deleted only *after* the new one is committed (MindSpore deletes
first, which is why its recovery guide asks for ``keep_checkpoint_max >= 2``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax

from graphpar._logging import notice_once
from graphpar.checkpoint import directory as ckpt_dir
from graphpar.checkpoint import recovery, store, writer_lock
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.serialization import SUFFIX, save_state
from graphpar.nn.cell import Cell
from graphpar.train.callback._callback import Callback, RunContext


def _non_negative(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"CheckpointConfig({name}={value!r}): must be an int >= 0")
    return value


class CheckpointConfig:
    """``CheckpointConfig(save_checkpoint_steps=1, save_checkpoint_seconds=0, keep_checkpoint_max=5,
    keep_checkpoint_per_n_minutes=0, integrated_save=True, async_save=False, saved_network=None,
    append_info=None, ...)`` with MindSpore's validation and precedence rules."""

    def __init__(self, save_checkpoint_steps: int = 1, save_checkpoint_seconds: int = 0,
                 keep_checkpoint_max: int = 5, keep_checkpoint_per_n_minutes: int = 0, integrated_save: bool = True,
                 async_save: bool = False, saved_network: Any = None, append_info: Any = None,
                 enc_key: Any = None, enc_mode: str = "AES-GCM", exception_save: bool = False,
                 crc_check: bool = False, remove_redundancy: bool = False, format: str = "ckpt", **kwargs: Any):
        steps = _non_negative("save_checkpoint_steps", save_checkpoint_steps)
        seconds = _non_negative("save_checkpoint_seconds", save_checkpoint_seconds)
        keep_max = _non_negative("keep_checkpoint_max", keep_checkpoint_max)
        per_minutes = _non_negative("keep_checkpoint_per_n_minutes", keep_checkpoint_per_n_minutes)
        if saved_network is not None and not isinstance(saved_network, Cell):
            raise TypeError(f"CheckpointConfig(saved_network): expected None or a Cell, got "
                            f"{type(saved_network).__name__}")
        if not steps and not seconds and not keep_max and not per_minutes:
            raise ValueError("CheckpointConfig: save_checkpoint_steps, save_checkpoint_seconds, keep_checkpoint_max "
                             "and keep_checkpoint_per_n_minutes cannot all be 0 or None")
        if enc_key is not None:
            raise ValueError("CheckpointConfig(enc_key=...): encrypted checkpoints are not supported by graphpar")
        if format != "ckpt":
            raise ValueError(f"CheckpointConfig(format={format!r}): valid: 'ckpt'")
        for name, flag in (("integrated_save", integrated_save), ("async_save", async_save)):
            if not isinstance(flag, bool):
                raise TypeError(f"CheckpointConfig({name}={flag!r}): must be a bool")
        self._save_checkpoint_steps = steps
        self._save_checkpoint_seconds = None if steps else seconds
        self._keep_checkpoint_max = keep_max
        self._keep_checkpoint_per_n_minutes = None if keep_max else per_minutes
        if not keep_max and not per_minutes:
            self._keep_checkpoint_max = 1
        self._integrated_save = integrated_save
        self._async_save = async_save
        self._saved_network = saved_network
        self._append_info = self._check_append_info(append_info)
        self.exception_save = bool(exception_save)

    @staticmethod
    def _check_append_info(append_info: Any) -> list:
        if append_info is None:
            return []
        if not isinstance(append_info, list):
            raise TypeError(f"CheckpointConfig(append_info): expected a list, got {type(append_info).__name__}")
        for item in append_info:
            if not (item in ("epoch_num", "step_num") or isinstance(item, dict)):
                raise ValueError(f"CheckpointConfig(append_info): {item!r} is not valid; valid items: 'epoch_num', "
                                 "'step_num' or a dict of extra values")
        return append_info

    save_checkpoint_steps = property(lambda self: self._save_checkpoint_steps)
    save_checkpoint_seconds = property(lambda self: self._save_checkpoint_seconds)
    keep_checkpoint_max = property(lambda self: self._keep_checkpoint_max)
    keep_checkpoint_per_n_minutes = property(lambda self: self._keep_checkpoint_per_n_minutes)
    integrated_save = property(lambda self: self._integrated_save)
    async_save = property(lambda self: self._async_save)
    saved_network = property(lambda self: self._saved_network)
    append_info = property(lambda self: self._append_info)

    def get_checkpoint_policy(self) -> dict:
        return {"save_checkpoint_steps": self.save_checkpoint_steps,
                "save_checkpoint_seconds": self.save_checkpoint_seconds,
                "keep_checkpoint_max": self.keep_checkpoint_max,
                "keep_checkpoint_per_n_minutes": self.keep_checkpoint_per_n_minutes,
                "saved_network": self.saved_network}


class ModelCheckpoint(Callback):
    """``ModelCheckpoint(prefix="CKP", directory=None, config=None)``: save checkpoints while ``Model.train`` runs.

    Every process of a job runs it; one checkpoint is written by all of them together, into process 0's
    ``directory`` (default: the current directory).
    """

    def __init__(self, prefix: str = "CKP", directory: str | None = None, config: CheckpointConfig | None = None):
        super().__init__()
        if not isinstance(prefix, str) or not prefix or "/" in prefix:
            raise ValueError(f"ModelCheckpoint(prefix={prefix!r}): the prefix must be a non-empty str without '/'")
        if config is not None and not isinstance(config, CheckpointConfig):
            raise TypeError(f"ModelCheckpoint(config): expected a CheckpointConfig, got {type(config).__name__}")
        self._prefix = prefix  # as given; checkpoints are written under self._write_prefix (MindSpore's renaming)
        self._write_prefix = prefix
        self._directory = os.path.abspath(directory if directory is not None else os.getcwd())
        _refuse_a_file(self._directory)
        self._config = config or CheckpointConfig()
        self._latest_ckpt_file_name = ""
        self._last_triggered_step = 0
        self._last_time = time.time()
        self._agreed = False

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def latest_ckpt_file_name(self) -> str:
        return self._latest_ckpt_file_name

    @property
    def write_prefix(self) -> str:
        """The prefix this run's checkpoints are named with: ``prefix``, or ``{prefix}_N`` after MindSpore's renaming
        (known once training has begun)."""
        return self._write_prefix

    def begin(self, run_context: RunContext) -> None:
        cb_params = run_context.original_args()
        self._last_triggered_step = int(cb_params.get("cur_step_num", 0))
        self._last_time = time.time()
        if not self._agreed:
            self._directory = store.agree_on_path(self._directory, "ModelCheckpoint(directory)")
            self._agreed = True
        _refuse_a_file(self._directory)
        # process 0 owns the directory for the job (lock, prefix, clean-up); every process learns its answer
        answer = self._take_directory(cb_params.get("resumed_from")) if jax.process_index() == 0 else ""
        answer = json.loads(store.broadcast_text(answer))
        if "refused" in answer:
            raise CheckpointError(*answer["refused"])
        self._write_prefix = answer["prefix"]
        os.makedirs(self._directory, mode=0o700, exist_ok=True)  # owner-only, as the checkpoints in it

    def _take_directory(self, resumed_from: str | None) -> str:
        """Process 0: take the directory's lock, choose the prefix to write under, clear what interrupted saves of it
        left. JSON ``{"prefix": ...}``, or ``{"refused": [path, reason, fix]}`` when another live job holds it."""
        try:
            taken = writer_lock.acquire(self._directory, self._prefix)
        except CheckpointError as exc:
            return json.dumps({"refused": [exc.path, exc.reason, exc.fix]})
        job = recovery.job_id()
        previous = taken.previous
        if previous is not None:
            gone = "this process before it replaced itself (a recovery restart)" if previous.is_this_process() \
                else "no longer running"
            notice_once(f"ckpt-lock:{taken.path}:{previous.pid}", f"ModelCheckpoint: {taken.path} was left by "
                        f"{previous.describe()}, which is {gone}; this process takes it over")
        resumed_prefix = ckpt_dir.prefix_of(resumed_from, self._prefix) if resumed_from and \
            os.path.dirname(os.path.abspath(resumed_from)) == self._directory else None
        if resumed_prefix is not None:
            prefix = resumed_prefix  # continuing that training: its checkpoints and ours are one series
        elif previous is not None and previous.job == job and ckpt_dir.of_family(previous.prefix, self._prefix) \
                and (job is not None or recovery.should_roll_back()):
            prefix = previous.prefix  # a restart of this job: write where its first attempt wrote
        else:
            prefix = ckpt_dir.renamed_prefix(self._directory, self._prefix)
            if prefix != self._prefix:
                notice_once(f"ckpt-renamed:{self._directory}:{prefix}", f"ModelCheckpoint: {self._directory} "
                            f"already holds checkpoints of prefix '{self._prefix}' (an earlier run's); this run "
                            f"writes {prefix}-<epoch>_<step>.ckpt and leaves them (MindSpore's renaming)")
        writer_lock.record(taken, writer_lock.Owner.this_process(job, prefix))
        ckpt_dir.remove_stale(self._directory, prefix)
        return json.dumps({"prefix": prefix})

    def step_end(self, run_context: RunContext) -> None:
        self._save_ckpt(run_context.original_args())

    def end(self, run_context: RunContext) -> None:
        self._save_ckpt(run_context.original_args(), force_to_save=True)
        store.wait_for_saves()
        if jax.process_index() == 0:
            writer_lock.release(self._directory, self._prefix)

    def _check_save_ckpt(self, cb_params: Any, force_to_save: bool) -> bool:
        steps, seconds = self._config.save_checkpoint_steps, self._config.save_checkpoint_seconds
        if steps and steps > 0:
            return cb_params.cur_step_num >= self._last_triggered_step + steps or force_to_save
        if seconds and seconds > 0:
            now = time.time()
            if now - self._last_time > seconds or force_to_save:
                self._last_time = now
                return True
        return False

    def _append_dict(self, cb_params: Any) -> dict:
        out: dict = {}
        for item in self._config.append_info:
            if item == "epoch_num":
                out["epoch_num"] = int(cb_params.cur_epoch_num)
            elif item == "step_num":
                out["step_num"] = int(cb_params.cur_step_num)
            else:
                out.update(item)
        return out

    def _save_ckpt(self, cb_params: Any, force_to_save: bool = False) -> None:
        if cb_params.cur_step_num == self._last_triggered_step:
            return
        if not self._check_save_ckpt(cb_params, force_to_save):
            return
        step_in_epoch = int((cb_params.cur_step_num - 1) % cb_params.batch_num + 1)
        path = os.path.join(self._directory,
                            f"{self._write_prefix}-{cb_params.cur_epoch_num}_{step_in_epoch}{SUFFIX}")
        self._last_triggered_step = cb_params.cur_step_num
        network = self._config.saved_network if self._config.saved_network is not None else cb_params.train_network
        progress = {"epoch": int(cb_params.cur_epoch_num), "step": int(cb_params.cur_step_num),
                    "step_in_epoch": step_in_epoch, "batch_num": int(cb_params.batch_num),
                    "dataset_sink_mode": bool(cb_params.get("dataset_sink_mode", False)),
                    "sink_size": int(cb_params.get("sink_size", -1) or -1),
                    "dataset": {"epoch": int(cb_params.cur_step_num) // int(cb_params.batch_num),
                                "position": int(cb_params.cur_step_num) % int(cb_params.batch_num)}}
        config, directory, prefix = self._config, self._directory, self._write_prefix

        def on_commit() -> None:
            ckpt_dir.enforce_retention(directory, prefix, config.keep_checkpoint_max,
                                       config.keep_checkpoint_per_n_minutes, path)
            recovery.record(path, progress)

        save_state(network, path, integrated_save=config.integrated_save, async_save=config.async_save,
                   append_dict=self._append_dict(cb_params), extra={"train": progress, "prefix": prefix, "job": recovery.job_id()},
                   on_commit=on_commit, agree=False)
        self._latest_ckpt_file_name = path


def _refuse_a_file(directory: str) -> None:
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CheckpointError(directory, "ModelCheckpoint(directory) is an existing file, not a directory",
                              "Give a directory (it is created if missing) for the checkpoints, e.g. './ckpt'")


def checkpoint_callbacks(callbacks: Any) -> list[ModelCheckpoint]:
    """The ``ModelCheckpoint`` callbacks among ``Model.train``'s ``callbacks`` (None, one callback or a list)."""
    items = callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
    return [cb for cb in items if isinstance(cb, ModelCheckpoint)]
