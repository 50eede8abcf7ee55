"""The ``graphpar`` logger and one-time notices.

graphpar speaks through one named logger. Notices that would repeat every step (an ignored strategy, a fallback
taken) go through :func:`notice_once`, which remembers what it said for the life of the process.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("graphpar")
_said: set[str] = set()


def _is_default_root_handler(handler: logging.Handler) -> bool:
    """What ``logging.basicConfig()`` with no arguments installs: a stderr StreamHandler with BASIC_FORMAT.

    Libraries install it as a side effect (absl on its first log call, orbax logs at import; any module-level
    ``logging.warning(...)`` call runs basicConfig), so its presence says nothing about what the application wants.
    """
    formatter = handler.formatter
    return (type(handler) is logging.StreamHandler and handler.stream in (sys.stderr, sys.__stderr__)
            and formatter is not None and formatter._fmt == logging.BASIC_FORMAT)


def _ensure_handler() -> None:
    # A library normally leaves handlers to the application; graphpar's notices are part of its user interface
    # (MindSpore prints its [WARNING] lines the same way), so it adds a plain stderr handler, in one format, unless
    # the application configured logging itself (a root handler other than basicConfig's default: a file, a
    # format of its own, pytest's capture), in which case notices propagate to it. The level is INFO unless
    # someone set the graphpar logger's level (a user's DEBUG stays DEBUG); the root's level (WARNING under
    # basicConfig's default) would otherwise drop every INFO notice unseen.
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logger.handlers and all(_is_default_root_handler(h) for h in logging.getLogger().handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[graphpar %(levelname)s] %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


def notice_once(key: str, message: str, level: int = logging.WARNING) -> None:
    """Log ``message`` the first time ``key`` is seen in this process, never again."""
    if key in _said:
        return
    _said.add(key)
    _ensure_handler()
    logger.log(level, message)


def info(message: str) -> None:
    _ensure_handler()
    logger.info(message)


def warning(message: str) -> None:
    _ensure_handler()
    logger.warning(message)


def is_enabled(level: int) -> bool:
    """Whether a notice at ``level`` would be emitted (lets a caller skip formatting lines nobody sees)."""
    _ensure_handler()
    return logger.isEnabledFor(level)
