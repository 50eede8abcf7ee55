"""XLA's persistent compilation cache, switched as ``set_context(enable_compile_cache=..., compile_cache_path=...)``
says (``_context.compile_cache()``), before graphpar has XLA compile a program.

JAX keeps compiled executables on disk, keyed by the program, the compile options, the devices and JAX's version,
when ``jax_compilation_cache_dir`` is set: a second run of a script reads its train step back instead of compiling
it (a read executable is the one compiled). graphpar turns it on by default in the user's cache directory
(``~/.cache/graphpar/xla``) and says once, at info level, where it lives. JAX's own settings are left alone where the
user made them: a ``jax_compilation_cache_dir`` of their own is kept when graphpar's settings and MindSpore's
variables say nothing, and so is a ``jax_persistent_cache_min_compile_time_secs`` other than JAX's default.

JAX's default writes only programs that took a second or more to compile; graphpar lowers that to
:data:`MIN_COMPILE_SECONDS`: on a CPU, train steps of small models compile in 0.1-1 s, and the per-op programs of
eager code (milliseconds each) still stay out of the cache.

The folder is bounded with JAX's own mechanism, ``jax_compilation_cache_max_size`` (least recently used entries
dropped first, under a lock file that every reader and writer takes, so processes sharing the folder never read a
half-written or half-dropped entry): half of the compile cache's bound (``CompileCache.folder_max_bytes``; the
``steps`` folder has the other half). JAX takes that lock with the ``filelock`` package, a dependency of graphpar;
without it (an environment installed before) the folder is left unbounded and the announcement says so. A
``jax_compilation_cache_max_size`` of the user's own is kept unless ``GRAPHPAR_COMPILE_CACHE_MAX_SIZE`` is set.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import logging
from collections.abc import Iterator
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

from graphpar import _context
from graphpar._logging import notice_once

MIN_COMPILE_SECONDS = 0.1
# JAX 0.11 began storing programs that call back to the host (its cache write no longer skips them; read in JAX's
# compiler.py of 0.10.2, 0.11.0, 0.11.2 and 0.12.0)
CACHES_HOST_CALLBACKS = jax.__version_info__ >= (0, 11)
_JAX_DEFAULT_MIN_COMPILE_SECONDS = 1.0
_JAX_NO_BOUND = -1  # jax_compilation_cache_max_size's default


def use_persistent_cache(what: str, effects: tuple[str, ...] = ()) -> None:
    """Point JAX's persistent cache where the settings say, or switch it off, if it is not so already (cheap when
    nothing changed: four config reads), before ``what`` is compiled. JAX opens its cache once per process: a change
    of directory or switch resets it, so the next compile opens the new one. A program with JAX ``effects`` calls
    back to the host (an in-program op check of ``ops.runtime_checks``, a ``jax.debug.print``): JAX before 0.11
    never stores one, and graphpar says so once."""
    choice = _context.compile_cache()
    if choice.enabled and effects and not CACHES_HOST_CALLBACKS:
        notice_once(f"compile-cache-effects:{what}", f"{what} is not stored in XLA's persistent compilation cache: it "
                    f"calls back to the host ({', '.join(effects)}: op checks of labels or indices, debug prints), "
                    f"which JAX {jax.__version__} does not cache; it is compiled again in the next run", logging.INFO)
    directory, enabled = jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache
    if not choice.explicit and directory is not None and directory != choice.directory:
        return  # the user set up JAX's own cache; graphpar's defaults do not move it
    if choice.enabled:
        bound, unbounded = _xla_bound(choice)
        if directory == choice.directory and enabled and jax.config.jax_compilation_cache_max_size == bound:
            return
        if jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_DEFAULT_MIN_COMPILE_SECONDS:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
        jax.config.update("jax_compilation_cache_dir", choice.directory)
        jax.config.update("jax_enable_compilation_cache", True)
        if bound != _JAX_NO_BOUND:
            stamp_access_times(Path(choice.directory))
        jax.config.update("jax_compilation_cache_max_size", bound)
        compilation_cache.reset_cache()
        notice_once(f"compile-cache:{choice.directory}:{bound}",
                    f"compiled programs are cached in {choice.directory} and train steps in "
                    f"{os.path.join(choice.root, 'steps')} ({_bounds(choice, bound)}{unbounded}; "
                    "set_context(enable_compile_cache=False) or MS_COMPILER_CACHE_ENABLE=0 switches this off; "
                    "set_context(compile_cache_path=...) or MS_COMPILER_CACHE_PATH moves it; "
                    "GRAPHPAR_COMPILE_CACHE_MAX_SIZE bounds it)",
                    logging.WARNING if unbounded and choice.max_bytes is not None else logging.INFO)
    elif directory is not None and enabled:
        jax.config.update("jax_enable_compilation_cache", False)
        compilation_cache.reset_cache()


def _xla_bound(choice: _context.CompileCache) -> tuple[int, str]:
    """``jax_compilation_cache_max_size`` for XLA's folder, and what the announcement adds when that folder cannot be
    bounded as the settings say."""
    current = jax.config.jax_compilation_cache_max_size
    if choice.max_bytes is None and current not in (_JAX_NO_BOUND, choice.folder_max_bytes):
        return current, ""  # the user's own JAX setting
    bound = choice.folder_max_bytes
    if bound >= 0 and not has_filelock():
        return _JAX_NO_BOUND, (f"; XLA's folder {choice.directory} is not bounded: JAX bounds it only with the "
                               "filelock package installed (pip install filelock)")
    return bound, ""


@functools.cache
def has_filelock() -> bool:
    """Whether the ``filelock`` package is installed: JAX's bounded cache locks its folder with it (JAX refuses a
    bound without it)."""
    return importlib.util.find_spec("filelock") is not None


def stamp_access_times(folder: Path) -> None:
    """Give each entry of JAX's cache in ``folder`` that has no access-time file one (its modification time), before
    a bound is set: JAX writes them only while bounded, and the eviction of JAX 0.10 and 0.11 fails on an entry
    without one, so one entry written unbounded (by an earlier run) would refuse every later write (jax-ml/jax#39880;
    0.12 counts such an entry as the least recently used)."""
    try:
        for entry in folder.glob("*-cache"):
            stamp = entry.with_name(entry.name.removesuffix("-cache") + "-atime")
            if not stamp.exists():
                stamp.write_bytes(entry.stat().st_mtime_ns.to_bytes(8, "little"))
    except OSError:  # dropped meanwhile, or a folder not writable: JAX says what it cannot do itself
        pass


def _bounds(choice: _context.CompileCache, xla: int) -> str:
    """The bounds in force, as the announcement says them."""
    steps = choice.folder_max_bytes
    if steps < 0:
        return "no bound"
    if xla == steps:
        return f"at most {_bytes(2 * steps)} in all, least recently used dropped first"
    xla_words = "" if xla < 0 else f", XLA's at most {_bytes(xla)} (jax_compilation_cache_max_size)"
    return f"train steps at most {_bytes(steps)}{xla_words}, least recently used dropped first"


def _bytes(count: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:g} {unit}"
    return f"{count} B"


@contextlib.contextmanager
def watching_reads() -> Iterator[list[str]]:
    """The list of XLA's persistent-cache reads (JAX's cache-hit events) made in this block: an executable read back
    rather than compiled (``staging.executables`` cannot store it: XLA:CPU does not keep the kernels of an executable
    it read, so serialising it again writes a program that fails when it runs)."""
    reads: list[str] = []

    def on_event(event: str, **_: object) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            reads.append(event)

    jax.monitoring.register_event_listener(on_event)
    try:
        yield reads
    finally:
        jax.monitoring.unregister_event_listener(on_event)

