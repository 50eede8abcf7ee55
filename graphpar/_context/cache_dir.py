"""Where XLA's persistent compilation cache lives and whether it is on: MindSpore's ``enable_compile_cache`` /
``compile_cache_path`` settings and ``MS_COMPILER_CACHE_ENABLE`` / ``MS_COMPILER_CACHE_PATH`` variables, resolved
(pure: the settings are ``state``'s, the variables ``graphpar._env``'s)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from graphpar import _env


@dataclass(frozen=True)
class CompileCache:
    """The compile cache in force: compiled programs written to ``directory`` are read back by a later process
    instead of compiled again."""

    enabled: bool
    directory: str  # the XLA entries' folder: <root>/xla
    explicit: bool  # chosen by set_context or MindSpore's variables (else graphpar's default)

    @property
    def root(self) -> str:
        """The compile-cache root (``compile_cache_path``); XLA's entries lie in its ``xla`` folder."""
        return os.path.dirname(self.directory)


def resolve_compile_cache(enabled: bool | None, path: str | None) -> CompileCache:
    """On: ``set_context(enable_compile_cache=...)`` (``enabled``), else ``MS_COMPILER_CACHE_ENABLE`` (lower
    precedence than the context, as MindSpore documents it), else on (**Changed** from MindSpore's default off: an
    XLA executable read back is the one compiled, so reuse is safe, and it spares a rerun the compile). The root:
    ``set_context(compile_cache_path=...)`` (``path``), else ``MS_COMPILER_CACHE_PATH``, else
    ``$XDG_CACHE_HOME/graphpar`` (``~/.cache/graphpar``); XLA's entries go to ``<root>/xla``."""
    if enabled is None:
        enabled = _env.compile_cache_enabled()
    path = path or _env.compile_cache_path()
    explicit = enabled is not None or path is not None
    root = path if path is not None else os.path.join(_env.user_cache_home(), "graphpar")
    return CompileCache(True if enabled is None else enabled, os.path.join(os.path.abspath(root), "xla"), explicit)
