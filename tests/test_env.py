"""Boolean environment variables are read strictly: a word that means "off" switches off, a typo is refused by name.

``MS_ENABLE_RECOVERY=no`` (or ``off``, ``FALSE``) once read as true, and a fresh run resumed the previous run's
final checkpoint; every value but "", "0", "false" and "False" counted as on.
"""

from __future__ import annotations

import re

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


# --- issue 27, item 15: garbage settings are refused by name before anything starts ---------------------------
@pytest.mark.parametrize("flags", ["--xla_force_host_platform_device_count=abc",
                                   "--xla_force_host_platform_device_count=0",
                                   "--xla_force_host_platform_device_count=-2",
                                   "--xla_force_host_platform_device_count=8 --xla_force_host_platform_device_count="])
def test_a_cpu_device_count_that_is_no_count_is_refused_by_name(monkeypatch, flags):
    monkeypatch.setenv("XLA_FLAGS", flags)
    with pytest.raises(EnvVarError, match=r"XLA_FLAGS=.*is no device count; valid: a whole number >= 1"):
        _env.host_device_count()


def test_set_context_refuses_the_device_count_before_a_backend_reads_it(monkeypatch):
    """XLA printed its help for every flag (=abc) or 'Could not determine process_index' (=0) when JAX started."""
    import graphpar as ms

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=abc")
    with pytest.raises(EnvVarError, match="--xla_force_host_platform_device_count=abc is no device count"):
        ms.set_context(device_target="CPU")


@pytest.mark.parametrize(("flags", "count"), [("", None), ("--xla_dump_to=/tmp/x", None),
                                              ("--xla_force_host_platform_device_count=8", 8),
                                              ("--xla_force_host_platform_device_count=2 "
                                               "--xla_force_host_platform_device_count=4", 4)])
def test_a_usable_device_count_is_read(monkeypatch, flags, count):
    monkeypatch.setenv("XLA_FLAGS", flags)
    assert _env.host_device_count() == count


@pytest.mark.parametrize(("name", "value", "valid"), [
    ("GRAPHPAR_CLUSTER_TIMEOUT", "0", ">= 1"), ("MS_TOPO_TIMEOUT", "0", ">= 1"),
    ("GRAPHPAR_HEARTBEAT_TIMEOUT", "-5", ">= 1"), ("GRAPHPAR_HEARTBEAT_TIMEOUT", "0", ">= 1"),
    ("MS_SCHED_PORT", "99999", "1..65535"), ("MS_SCHED_PORT", "0", "1..65535")])
def test_integers_out_of_their_range_are_refused_by_name_where_they_apply(monkeypatch, name, value, valid):
    """They aborted the process in C++ (a zero join timeout, a negative heartbeat timeout) or raised OverflowError
    (MS_SCHED_PORT=99999) inside jax.distributed / the socket layer."""
    monkeypatch.delenv("GRAPHPAR_CLUSTER_TIMEOUT", raising=False)
    monkeypatch.setenv(name, value)
    env = _env.cluster_env()  # reading never raises
    assert env.present(name)
    with pytest.raises(EnvVarError, match=rf"{name}='{value}': out of range; valid: .*{re.escape(valid)}"):
        env.check(name)


def test_in_range_timeouts_and_ports_are_read(monkeypatch):
    monkeypatch.setenv("GRAPHPAR_CLUSTER_TIMEOUT", "-1")  # msrun's "no limit"
    monkeypatch.setenv("GRAPHPAR_HEARTBEAT_TIMEOUT", "30")
    monkeypatch.setenv("MS_SCHED_PORT", "8118")
    env = _env.cluster_env()
    env.check("GRAPHPAR_CLUSTER_TIMEOUT", "GRAPHPAR_HEARTBEAT_TIMEOUT", "MS_SCHED_PORT")
    assert (env.cluster_timeout, env.heartbeat_timeout, env.ms_sched_port) == (-1, 30, 8118)


@pytest.mark.parametrize(("value", "seconds"), [(None, 60.0), ("", 60.0), ("5", 5.0), ("0.5", 0.5), ("-1", -1.0)])
def test_the_early_exit_grace(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv("GRAPHPAR_EARLY_EXIT_GRACE", raising=False)
    else:
        monkeypatch.setenv("GRAPHPAR_EARLY_EXIT_GRACE", value)
    assert _env.early_exit_grace() == seconds
    monkeypatch.setenv("GRAPHPAR_EARLY_EXIT_GRACE", "nan")
    with pytest.raises(EnvVarError, match="GRAPHPAR_EARLY_EXIT_GRACE='nan': must be a number of seconds"):
        _env.early_exit_grace()
