"""graphpar's INFO notices reach the console even when something configured the root logger first.

absl's first log call runs ``logging.basicConfig()`` (orbax logs while graphpar imports it), which gives the root
logger a handler at level WARNING; graphpar then leaves handlers to "the application", and its INFO notices (a
setting that has no effect, a redistribution in a user's SEMI_AUTO plan) were dropped unseen.
"""

import logging

import pytest

from graphpar import _logging


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture()
def fresh_graphpar_logger(monkeypatch):
    """The graphpar logger as a new process has it (no handler, no level), a root logger as basicConfig leaves it."""
    logger, root = _logging.logger, logging.getLogger()
    saved = (logger.level, logger.handlers[:], logger.propagate, root.level)
    keep = _Keep()
    monkeypatch.setattr(_logging, "_said", set())
    logger.handlers[:] = []
    logger.propagate = True
    logger.setLevel(logging.NOTSET)
    root.setLevel(logging.WARNING)
    root.addHandler(keep)
    try:
        yield keep
    finally:
        root.removeHandler(keep)
        root.setLevel(saved[3])
        logger.handlers[:] = saved[1]
        logger.propagate = saved[2]
        logger.setLevel(saved[0])


def test_info_notice_reaches_a_root_handler(fresh_graphpar_logger):
    _logging.notice_once("port-qa:info", "set_auto_parallel_context(x=...) has no effect", logging.INFO)
    assert [r.getMessage() for r in fresh_graphpar_logger.records] == ["set_auto_parallel_context(x=...) has no "
                                                                       "effect"]


def test_a_level_the_user_set_is_kept(fresh_graphpar_logger, monkeypatch):
    """Without any root handler graphpar installs its own; a DEBUG level the user chose stays DEBUG."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    _logging.logger.setLevel(logging.DEBUG)
    _logging.notice_once("port-qa:debug", "every edge", logging.DEBUG)
    assert _logging.logger.level == logging.DEBUG and _logging.is_enabled(logging.DEBUG)
    assert _logging.logger.handlers  # graphpar's own stderr handler
