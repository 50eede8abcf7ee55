"""Where XLA's persistent compilation cache lives and whether it is on: MindSpore's ``enable_compile_cache`` /
``compile_cache_path`` settings and ``MS_COMPILER_CACHE_ENABLE`` / ``MS_COMPILER_CACHE_PATH`` variables, and how
large it may grow (graphpar's ``GRAPHPAR_COMPILE_CACHE_MAX_SIZE``), resolved (pure: the settings are ``state``'s, the
variables ``graphpar._env``'s)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from graphpar import _env

# The default bound of the whole cache on disk: each train step takes one entry in each of the cache's two folders
# (a 6-3 Dense step: 27 KB in steps, a few KB compressed in XLA's; entries grow with the program), so a few GiB keep
# the steps of many scripts while a user's ~/.cache stays bounded however often scripts change.
DEFAULT_MAX_BYTES = 4 << 30


@dataclass(frozen=True)
class CompileCache:
    """The compile cache in force: compiled programs written to ``directory`` are read back by a later process
    instead of compiled again."""

    enabled: bool
    directory: str  # the XLA entries' folder: <root>/xla
    explicit: bool  # chosen by set_context or MindSpore's variables (else graphpar's default)
    # the bound of the whole cache on disk in bytes (GRAPHPAR_COMPILE_CACHE_MAX_SIZE), -1 for none; None: graphpar's
    # default DEFAULT_MAX_BYTES
    max_bytes: int | None = None

    @property
    def folder_max_bytes(self) -> int:
        """The bound of each of the cache's two folders (XLA's ``xla``, graphpar's ``steps``): half the whole
        bound, so the root stays under it; -1: none. Each folder drops its least recently used entries to stay
        under it."""
        whole = DEFAULT_MAX_BYTES if self.max_bytes is None else self.max_bytes
        return -1 if whole < 0 else max(whole // 2, 1)

    @property
    def root(self) -> str:
        """The compile-cache root (``compile_cache_path``); XLA's entries lie in its ``xla`` folder."""
        return os.path.dirname(self.directory)


def resolve_compile_cache(enabled: bool | None, path: str | None) -> CompileCache:
    """On: ``set_context(enable_compile_cache=...)`` (``enabled``), else ``MS_COMPILER_CACHE_ENABLE`` (lower
    precedence than the context, as MindSpore documents it), else on (**Changed** from MindSpore's default off: an
    XLA executable read back is the one compiled, so reuse is safe, and it spares a rerun the compile). The root:
    ``set_context(compile_cache_path=...)`` (``path``), else ``MS_COMPILER_CACHE_PATH``, else
    ``$XDG_CACHE_HOME/graphpar`` (``~/.cache/graphpar``); XLA's entries go to ``<root>/xla``. The bound:
    ``GRAPHPAR_COMPILE_CACHE_MAX_SIZE``, else :data:`DEFAULT_MAX_BYTES`."""
    if enabled is None:
        enabled = _env.compile_cache_enabled()
    path = path or _env.compile_cache_path()
    explicit = enabled is not None or path is not None
    root = path if path is not None else os.path.join(_env.user_cache_home(), "graphpar")
    return CompileCache(True if enabled is None else enabled, os.path.join(os.path.abspath(root), "xla"), explicit,
                        _env.compile_cache_max_size())
