"""Boolean environment variables are read strictly: a word that means "off" switches off, a typo is refused by name.

``MS_ENABLE_RECOVERY=no`` (or ``off``, ``FALSE``) once read as true, and a fresh run resumed the previous run's
final checkpoint; every value but "", "0", "false" and "False" counted as on.
"""

from __future__ import annotations

import pytest

from graphpar import _env
from graphpar.checkpoint import recovery
from graphpar.errors import EnvVarError


@pytest.mark.parametrize("value", ["0", "false", "False", "FALSE", "no", "No", "off", "OFF", " off ", ""])
def test_recovery_off_words_switch_recovery_off(monkeypatch, value):
    monkeypatch.setenv("MS_ENABLE_RECOVERY", value)
    monkeypatch.delenv("GRAPHPAR_RESTART_COUNT", raising=False)
    assert _env.cluster_env().ms_enable_recovery is False
    assert not recovery.may_roll_back() and not recovery.should_roll_back()  # a fresh run starts fresh


@pytest.mark.parametrize("value", ["1", "true", "True", "yes", "ON"])
def test_recovery_on_words_switch_recovery_on(monkeypatch, value, tmp_path):
    monkeypatch.setenv("MS_ENABLE_RECOVERY", value)
    monkeypatch.setenv("MS_RECOVERY_PATH", str(tmp_path))
    monkeypatch.delenv("GRAPHPAR_RESTART_COUNT", raising=False)
    assert _env.cluster_env().ms_enable_recovery is True
    assert recovery.may_roll_back()
    assert not recovery.should_roll_back()  # no recovery record yet: the previous run finished


@pytest.mark.parametrize("value", ["maybe", "2", "enable", "y-e-s"])
def test_a_value_that_is_no_boolean_is_refused_by_name_where_recovery_is_decided(monkeypatch, value):
    monkeypatch.setenv("MS_ENABLE_RECOVERY", value)
    env = _env.cluster_env()  # reading the placement variables never raises
    with pytest.raises(EnvVarError, match=r"MS_ENABLE_RECOVERY=.*must be a boolean: one of 1, true, yes, on"):
        env.ms_enable_recovery
    with pytest.raises(EnvVarError, match="MS_ENABLE_RECOVERY"):
        recovery.should_roll_back()


@pytest.mark.parametrize(("value", "expected"), [("off", False), ("no", False), ("on", True), ("1", True), ("", None)])
def test_other_switches_read_the_same_words(monkeypatch, value, expected):
    monkeypatch.setenv("GRAPHPAR_PROGRESS", value)
    assert _env.progress_bar_enabled() is expected
    monkeypatch.setenv("GRAPHPAR_PROGRESS", "sometimes")
    with pytest.raises(EnvVarError, match="GRAPHPAR_PROGRESS"):
        _env.progress_bar_enabled()
