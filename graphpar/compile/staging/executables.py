"""The executable cache: a step's compiled program on disk, keyed by what the program is made of, above lowering.

XLA's persistent cache (``staging.xla_cache``) is keyed by the lowered program, so a second run of a script still
traces the step for autodiff and lowers it (0.2-0.3 s for the GPT bench model on a CPU) before it finds the
executable. This cache is keyed one stage earlier, by a digest (``staging.fingerprint``) of the planned graph (the
network is still traced and planned on every run: its code is covered through the traced graph), of the caller's
recipe of the step (the train cell's type and settings, the optimizer's kind, hyperparameters and state structure,
loss scaling, accumulation: ``Orchestrator.compiled``'s ``recipe``), of the step's signature (argument avals and
shardings, donation, the mesh's devices), of the environment (XLA flags, JAX's configuration, the platform and
devices) and of the code (graphpar's sources, JAX's and jaxlib's versions). A hit loads the executable with JAX's own
serialisation (``jax.experimental.serialize_executable``) and skips the autodiff trace, the lowering and XLA's compile
(or cache read); a step whose recipe the caller cannot describe (a user's train cell or optimizer class, a
functional step) has no recipe and uses XLA's cache alone.

Files live in the compile cache's ``steps`` folder (``<compile_cache_path>/steps``, beside XLA's ``xla``), one per
key: a header, the sha256 of the payload, the payload (the serialised executable and its argument and result
trees). A file that is truncated, corrupt or unreadable by this JAX is a miss with a notice naming it, and the step
is compiled (and the file rewritten); never a crash, never another program. Like XLA's cache, the folder must be
the user's own: loading an executable runs code from it.

The folder is bounded (``CompileCache.folder_max_bytes``: half of ``GRAPHPAR_COMPILE_CACHE_MAX_SIZE``, 4 GiB by
default): each store drops the least recently loaded or written entries beyond it. Processes sharing the folder
need no lock: writes are renames and evictions unlinks of whole files (``staging.entry_files``).
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import jax
from jax.experimental import serialize_executable

from graphpar import _context
from graphpar._logging import notice_once
from graphpar.compile.staging import entry_files

_MAGIC = b"graphpar-step-executable-1\n"


def directory() -> Path | None:
    """The folder of the executable cache, None when the compile cache is off."""
    choice = _context.compile_cache()
    return Path(choice.root) / "steps" if choice.enabled else None


def device_ids(shardings: Any) -> tuple[int, ...] | None:
    """The device assignment of a step (what its executable is loaded onto, in order) from the shardings of its
    arguments: a mesh's devices in mesh order, or the one device; None in a multi-process run (each process loads
    onto its own devices: not stored) or with no such sharding."""
    if jax.process_count() > 1:
        return None
    for sharding in jax.tree.leaves(shardings):
        if isinstance(sharding, jax.sharding.NamedSharding):
            return tuple(d.id for d in sharding.mesh.devices.flat)
        if isinstance(sharding, jax.sharding.SingleDeviceSharding):
            return tuple(d.id for d in sharding.device_set)
    return None


def load(folder: Path, key: str) -> jax.stages.Compiled | None:
    """The executable stored under ``key``, or None (no file; a damaged file: a notice names it)."""
    path = folder / f"{key}{entry_files.SUFFIX}"
    payload = entry_files.read(path, _MAGIC)
    if payload is None:
        return None
    if isinstance(payload, str):
        return _miss(path, payload)
    try:
        serialized, in_tree, out_tree, ids = pickle.loads(payload)
        by_id = {d.id: d for d in jax.devices()}
        return serialize_executable.deserialize_and_load(serialized, in_tree, out_tree,
                                                         execution_devices=[by_id[i] for i in ids])
    except Exception as exc:  # noqa: BLE001 - whatever a stale file makes this JAX raise, the step is compiled
        return _miss(path, f"this JAX {jax.__version__} cannot load it ({type(exc).__name__}: {exc})")


def serialisable(executable: jax.stages.Compiled, what: str) -> bool:
    """Whether JAX can serialise ``executable`` (not one with constants passed as arguments); said once if not."""
    return _serialised(executable, what) is not None


def _serialised(executable: jax.stages.Compiled, what: str) -> tuple | None:
    try:
        return serialize_executable.serialize(executable)
    except (ValueError, NotImplementedError, TypeError) as exc:
        notice_once(f"step-executable-unserialisable:{what}", f"{what} is not stored in graphpar's executable cache "
                    f"(JAX cannot serialise it: {exc}); XLA's compilation cache still serves its compile",
                    logging.INFO)
        return None


def store(folder: Path, key: str, executable: jax.stages.Compiled, devices: tuple[int, ...], what: str) -> None:
    """Write ``executable`` (compiled, not read back from XLA's cache: ``xla_cache.watching_reads``) for the
    ``devices`` of :func:`device_ids` under ``key``, atomically (a reader never sees half a file), then drop the
    least recently used entries beyond the folder's bound; an executable JAX cannot serialise, one larger than the
    bound or a folder that cannot be written is said once and skipped."""
    serialised = _serialised(executable, what)
    if serialised is None:
        return
    try:
        payload = pickle.dumps((*serialised, devices), protocol=pickle.HIGHEST_PROTOCOL)
    except (TypeError, pickle.PicklingError) as exc:
        notice_once(f"step-executable-unpicklable:{what}", f"{what} is not stored in graphpar's executable cache "
                    f"(its argument structure cannot be written: {exc})", logging.INFO)
        return
    bound = _context.compile_cache().folder_max_bytes
    if 0 <= bound < len(payload):
        notice_once(f"step-executable-too-large:{what}", f"{what} is not stored in graphpar's executable cache: its "
                    f"{len(payload)} bytes exceed the folder's bound of {bound} bytes (half of "
                    "GRAPHPAR_COMPILE_CACHE_MAX_SIZE)", logging.INFO)
        return
    try:
        written = entry_files.write(folder, key, _MAGIC, payload)
        entry_files.evict(folder, bound, keep=written)
    except OSError as exc:
        notice_once(f"step-executable-unwritable:{folder}", f"graphpar's executable cache cannot write in {folder} "
                    f"({exc}); steps are compiled again in the next run", logging.WARNING)


def _miss(path: Path, why: str) -> Any:
    notice_once(f"step-executable-damaged:{path}", f"the cached step executable {path} is not used: {why}; the "
                "step is compiled again and the file rewritten", logging.WARNING)
    return None
