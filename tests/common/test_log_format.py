"""graphpar's notices come in one format, ``[graphpar LEVEL] message``, whether or not a library ran
``logging.basicConfig()`` before them (absl does on its first log call; orbax logs at import), and go to the
application's own logging when it configured some (issue 26: runs printed both ``WARNING:graphpar:`` and
``[graphpar WARNING]``). Each case runs in a fresh interpreter, since logging is configured once per process."""

import subprocess
import sys

import pytest

_SCRIPT = """
import logging
{setup}
from graphpar import _logging
_logging.warning("a warning")
_logging.info("a routine fact")
"""


def _stderr(setup: str) -> list[str]:
    run = subprocess.run([sys.executable, "-c", _SCRIPT.format(setup=setup)], capture_output=True, text=True,
                         timeout=120, check=True)
    return [line for line in run.stderr.splitlines() if "a warning" in line or "a routine fact" in line]


@pytest.mark.parametrize("setup", ["", "logging.basicConfig()", "logging.warning('a library speaks first')"])
def test_one_format_with_or_without_a_default_root_handler(setup):
    assert _stderr(setup) == ["[graphpar WARNING] a warning", "[graphpar INFO] a routine fact"]


def test_an_application_logging_config_receives_the_notices():
    lines = _stderr("logging.basicConfig(format='app|%(name)s|%(levelname)s|%(message)s', level=logging.INFO)")
    assert lines == ["app|graphpar|WARNING|a warning", "app|graphpar|INFO|a routine fact"]
