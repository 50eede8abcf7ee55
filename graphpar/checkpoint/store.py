"""Writing and reading checkpoint directories with orbax, and committing them with the manifest.

Saving (:func:`write`): every process calls it with the same arguments; orbax writes, in parallel, the shards each
process owns (one copy of each replicated shard), into a temporary directory it renames on commit. Then process 0
writes the manifest (``graphpar.json``, :mod:`graphpar.checkpoint.manifest`) and runs the caller's ``on_commit``
(retention, recovery record). With ``async_save`` the device-to-host copy happens before :func:`write` returns and
the rest runs on a background thread; the next save, a load, or interpreter exit waits for it, as MindSpore's
``asyn_save_ckpt`` thread is waited for.

Reading (:func:`read_arrays`): the named arrays of some groups, as numpy arrays on every process, after the manifest
has verified every file. A multi-process job places them afterwards (the train step puts each value where its plan
wants it).

The orbax tree is ``{"network": {name: array}, "optimizer": {path: array}, "append": {name: array}}``; with
``integrated_save=False`` each array is the stack of the ranks' slices (:mod:`graphpar.checkpoint.slices`).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

from graphpar._logging import notice_once
from graphpar.checkpoint import manifest, replacing, same_values, staged, tensorstore_leak
from graphpar.checkpoint.entries import Entry
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.slices import global_rank, rank_devices, stack_rows

TMP_MARKER = replacing.ORBAX_TMP
FILE_MODE, DIRECTORY_MODE = 0o600, 0o700  # owner only (MindSpore: 0400 checkpoint files, 0600 strategy files)
_lock = threading.Lock()
_checkpointer: Any = None
_pending: "PendingSave | None" = None
_barriers = iter(range(1 << 62))
TERM_WAIT_SECONDS = 3.0  # under graphpar launch's 5 s between SIGTERM and SIGKILL


class _RaisedByGraphpar(logging.Filter):
    """Drops orbax's log of an exception on its background save thread: the same exception reaches
    ``wait_until_finished``, and graphpar raises it as one :class:`CheckpointError` line (a read-only directory
    would otherwise print pages of orbax traceback before it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and record.exc_info is not None
                    and record.threadName != threading.main_thread().name
                    and f"{os.sep}orbax{os.sep}checkpoint{os.sep}" in record.pathname)


def _orbax() -> Any:
    global _checkpointer
    if _checkpointer is None:
        import orbax.checkpoint as ocp

        tensorstore_leak.contain()
        logging.getLogger("absl").addFilter(_RaisedByGraphpar())
        # one checkpointer for the process (orbax's own objects are reused); its temporary directory is created
        # owner-only, so no other user can reach a file of a checkpoint at any time
        _checkpointer = ocp.AsyncCheckpointer(ocp.PyTreeCheckpointHandler(),
                                              file_options=ocp.options.FileOptions(path_permission_mode=DIRECTORY_MODE))
        atexit.register(wait_for_saves)
    return _checkpointer


@dataclass
class PendingSave:
    """A save whose files may still be being written (``async_save``); ``wait()`` returns when it is committed."""

    path: str
    thread: threading.Thread | None = None
    error: BaseException | None = None
    seconds: float = 0.0  # from the call to the commit

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            # a file-system problem is said in full in one line; anything else keeps orbax's traceback as its cause
            raise _save_failed(self.path, error) from (None if _os_error(error) else error)


def _finish_save_then_terminate(signum: int, frame: Any) -> None:
    """SIGTERM while an asynchronous save is in flight (``graphpar launch`` stops the survivors of a failed
    process this way): give the save up to TERM_WAIT_SECONDS to commit, then terminate as SIGTERM would. Its files
    may all be written already, and only the commit (process 0's rename and manifest) would be lost otherwise."""
    pending = _pending
    if pending is not None and pending.thread is not None:
        pending.thread.join(timeout=TERM_WAIT_SECONDS)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _commit_before_terminating() -> None:
    """Install :func:`_finish_save_then_terminate` unless the program handles SIGTERM itself."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _finish_save_then_terminate)


def wait_for_saves() -> None:
    """Block until the last asynchronous save is committed (raises its error, if it failed)."""
    global _pending
    pending, _pending = _pending, None
    if pending is not None:
        pending.wait()


def barrier(name: str) -> None:
    """Every process waits here (a no-op in a single-process job)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"graphpar_checkpoint_{name}_{next(_barriers)}")


def broadcast_text(text: str) -> str:
    """Process 0's ``text`` on every process (a no-op in a single-process job)."""
    if jax.process_count() == 1:
        return text
    from jax.experimental import multihost_utils

    raw = text.encode()
    length = int(multihost_utils.broadcast_one_to_all(np.int32(len(raw))))
    buffer = np.zeros(length, np.uint8)
    if jax.process_index() == 0:
        buffer[:] = np.frombuffer(raw, np.uint8)
    return bytes(np.asarray(multihost_utils.broadcast_one_to_all(buffer), np.uint8)).decode()


def agree_on_path(path: str, what: str) -> str:
    """Process 0's ``path`` on every process. A collective save has one directory; MindSpore scripts often give
    every rank its own (``./ckpt_of_rank_/{rank}``), so a differing path is noted once and process 0's is used."""
    if jax.process_count() == 1:
        return path
    chosen = broadcast_text(os.path.abspath(path))
    if chosen != os.path.abspath(path):
        notice_once(f"ckpt-path:{path}", f"{what}: this process was given {path} but process 0 {chosen}; a graphpar "
                    "checkpoint is written by all processes together, into process 0's directory (every process "
                    "writes the shards it holds)")
    return chosen


def _os_error(error: BaseException) -> OSError | None:
    """The operating-system error at the root of ``error`` (orbax and tensorstore wrap them), if any."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.strerror:
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _save_failed(path: str, error: BaseException) -> CheckpointError:
    """One line for a save that failed: the directory and the file-system problem when there is one (a folder
    made read-only, a full disk), not orbax's traceback."""
    cause = _os_error(error)
    if cause is None:
        return CheckpointError(path, f"saving failed: {type(error).__name__}: {error}")
    where = f" ({cause.filename})" if cause.filename and not str(cause.filename).startswith(path) else ""
    return CheckpointError(os.path.dirname(path), f"cannot write checkpoint {os.path.basename(path)} into this "
                           f"directory: {cause.strerror}{where}", "Make the directory writable by this process "
                           "(and check the free space), or save into another directory")


def _check_writable(folder: str, path: str) -> None:
    """Create ``folder`` (owner-only) if missing and prove this process can write into it, so a read-only or
    missing directory is one clear error before orbax starts (orbax would fail on a background thread, log
    pages of tracebacks and leave its commit waiting)."""
    try:
        os.makedirs(folder, mode=DIRECTORY_MODE, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".graphpar-probe-", dir=folder))
    except (FileExistsError, NotADirectoryError):
        raise CheckpointError(folder, f"cannot write checkpoint {os.path.basename(path)} into it: it, or a folder "
                              "above it, is a file, not a directory", "Save into a writable directory") from None
    except OSError as exc:
        raise _save_failed(path, OSError(exc.errno, exc.strerror)) from None


def _owner_only(root: str) -> None:
    """Files 0600 and directories 0700 under ``root`` (tensorstore creates them with the umask's 0644/0755;
    ``root`` itself was created 0700, so nobody else could reach them meanwhile)."""
    os.chmod(root, DIRECTORY_MODE)
    for folder, folders, files in os.walk(root):
        for name in folders:
            os.chmod(os.path.join(folder, name), DIRECTORY_MODE)
        for name in files:
            os.chmod(os.path.join(folder, name), FILE_MODE)


def _sharding_text(value: Any) -> dict | None:
    if not isinstance(value, jax.Array) or not isinstance(value.sharding, NamedSharding):
        return None  # a host value, or an array not laid out on a mesh
    sharding = value.sharding
    mesh = sharding.mesh
    spec = [None if p is None else (list(p) if isinstance(p, tuple) else [p]) for p in sharding.spec]
    return {"mesh": {"axis_names": list(mesh.axis_names), "axis_sizes": [int(s) for s in mesh.devices.shape]},
            "spec": spec}


def _storable(value: Any) -> Any:
    """What orbax is given for ``value``: global jax.Arrays as they are; numpy for host values and (in a
    multi-process job) for arrays that only this process holds, which process 0 then writes."""
    if isinstance(value, jax.Array):
        if jax.process_count() > 1 and value.is_fully_addressable:
            return np.asarray(value)
        return value
    return np.asarray(value)


def _layout(entries: Sequence[Entry], integrated: bool,
            row_ranks: list[int] | None) -> tuple[dict, list[dict], list[int] | None]:
    tree: dict[str, dict[str, Any]] = {}
    records = []
    devices = None if integrated or row_ranks is not None else rank_devices([e.value for e in entries])
    for entry in entries:
        shape = entry.global_shape if entry.slices is not None else tuple(np.shape(entry.value))
        record = {"name": entry.name, "group": entry.group, "shape": list(shape),
                  "dtype": np.dtype(entry.value.dtype).name}
        if entry.group == "network":
            record["trainable"] = bool(entry.trainable)
        if entry.pipeline_stage is not None:
            record["pipeline_stage"] = int(entry.pipeline_stage)
        if integrated:
            stored = _storable(entry.value)
            record["sharding"] = _sharding_text(entry.value)
        elif entry.slices is not None:
            stored, record["slices"] = np.asarray(entry.value), entry.slices
        else:
            stored, record["slices"] = stack_rows(entry.value, devices, entry.name)
        tree.setdefault(entry.group, {})[entry.name] = stored
        records.append(record)
    ranks = row_ranks if row_ranks is not None else None if devices is None else [global_rank(d) for d in devices]
    return tree, records, ranks


def write(path: str, entries: Sequence[Entry], *, integrated: bool = True, async_save: bool = False,
          extra: dict[str, Any] | None = None, on_commit: Callable[[], None] | None = None,
          row_ranks: list[int] | None = None) -> PendingSave:
    """Save ``entries`` as the checkpoint directory ``path``, replacing a graphpar checkpoint of that name on commit
    (:mod:`graphpar.checkpoint.replacing`; anything else of that name is refused). Collective: every process calls
    it. Returns the pending save (already committed unless ``async_save``). ``row_ranks``: the ranks of the rows of
    entries that come as rows already (``Entry.slices``)."""
    global _pending
    wait_for_saves()
    if not entries:
        raise CheckpointError(path, "nothing to save (no Parameters or arrays were given)")
    path = os.path.abspath(path)
    replacing.check_replaceable(path)
    _check_writable(os.path.dirname(path), path)
    if jax.process_index() == 0:
        replacing.settle(path)  # a replacement of this name that a killed process left half done
    barrier("settle")
    target = replacing.staging(path)
    started = time.perf_counter()
    import orbax.checkpoint as ocp

    if integrated:
        staged.gather_staged(entries)  # a multi-process pipeline's stage values, to every host
    tree, records, ranks = _layout(entries, integrated, row_ranks)
    local = [(r["name"], tree[e.group][e.name]) for e, r in zip(entries, records)
             if isinstance(tree[e.group][e.name], np.ndarray) and "slices" not in r]
    same_values.check_same_on_every_process(path, [n for n, _ in local], [v for _, v in local])
    body = {"layout": "integrated" if integrated else "sliced", "entries": records,
            "process_count": jax.process_count(), "device_count": jax.device_count(), **(extra or {})}
    if ranks is not None:
        body["ranks"] = ranks
    checkpointer = _orbax()
    with _lock:
        checkpointer.save(target, args=ocp.args.PyTreeSave(tree), force=True)
    pending = PendingSave(path)

    def commit() -> None:
        try:
            checkpointer.wait_until_finished()
            if jax.process_index() == 0:
                _owner_only(target)
                manifest.write(target, {**body, "saved_at": time.time(), "files": manifest.file_checksums(target)})
                os.chmod(os.path.join(target, manifest.MANIFEST), FILE_MODE)
                if target != path:  # committed: the new checkpoint replaces the old one
                    replacing.swap(target, path)
                if on_commit is not None:
                    on_commit()
        except BaseException as exc:  # noqa: BLE001 - surfaced by wait()
            pending.error = exc
        finally:
            pending.seconds = time.perf_counter() - started

    if async_save:
        _commit_before_terminating()
        pending.thread = threading.Thread(target=commit, name="graphpar-async-save", daemon=False)
        pending.thread.start()
        _pending = pending
    else:
        commit()
        barrier("commit")
        pending.wait()
    return pending


def read_manifest(path: str, verify: bool = True) -> dict[str, Any]:
    """The manifest of checkpoint ``path`` (waiting for a save of it in flight), its files verified. A replacement
    of ``path`` that was interrupted is read where its committed checkpoint is (:func:`replacing.committed`)."""
    if _pending is not None and os.path.abspath(_pending.path) == os.path.abspath(path):
        wait_for_saves()
    where = replacing.committed(path)
    body = manifest.read(where)
    if verify:
        manifest.verify(where, body)
    return body


def read_arrays(path: str, body: dict[str, Any], groups: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """``{group: {name: numpy array}}`` of the entries of ``groups`` (stacked rows for a sliced checkpoint)."""
    import orbax.checkpoint as ocp

    path = os.path.abspath(replacing.committed(path))  # orbax wants absolute paths (relative: the current dir)
    wanted = [r for r in body["entries"] if r["group"] in groups]
    if not wanted:
        return {g: {} for g in groups}
    item: dict[str, dict[str, Any]] = {}
    for record in wanted:
        item.setdefault(record["group"], {})[record["name"]] = 0
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
    try:
        with _lock:
            restored = _orbax().restore(path, args=ocp.args.PyTreeRestore(item=item, restore_args=restore_args,
                                                                          partial_restore=True))
    except OSError as exc:  # a path problem (permissions, a directory gone), not a damaged checkpoint
        raise CheckpointError(path, f"cannot be read: {exc.strerror or exc}",
                              "Check that the path exists and is readable by this process") from exc
    except Exception as exc:  # orbax/tensorstore raise many kinds; name the checkpoint
        raise CheckpointError(path, f"orbax could not read it: {type(exc).__name__}: {exc}",
                              "The checkpoint may be damaged; load an earlier one") from exc
    return {g: {n: np.asarray(v) for n, v in restored.get(g, {}).items()} for g in groups}
