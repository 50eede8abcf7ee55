"""Test configuration: 8 simulated CPU devices, the plan's invariants checked after every planning pass
(``GRAPHPAR_CHECK_PASSES``, read by ``graphpar._env``; subprocesses the tests start inherit it), XLA's persistent
compilation cache off, a fresh graphpar context for every test."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("GRAPHPAR_CHECK_PASSES", "1")
# XLA's persistent compilation cache (on by default in $XDG_CACHE_HOME/graphpar/xla) stays off, so every test compiles
# what it counts; tests/compile/test_compile_cache.py switches it on in temporary directories. The user's cache
# directory is a temporary one too: tests that run code with MindSpore's variables removed (MS_*, as a fresh job
# sees them) get the cache on by default, and must not write into the user's home.
os.environ["MS_COMPILER_CACHE_ENABLE"] = "0"
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="graphpar-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_context(tmp_path, monkeypatch):
    """Every test starts from default contexts and writes dumps under its own tmp dir."""
    import graphpar
    from graphpar import _context

    _context.reset_context()
    _context.reset_auto_parallel_context()
    _context.reset_algo_parameters()
    _context.reset_op_strategy_config()
    graphpar.set_context(save_graphs_path=str(tmp_path / "ir_dumps"))
    yield
    _context.reset_context()
    _context.reset_auto_parallel_context()
    _context.reset_algo_parameters()
    _context.reset_op_strategy_config()


@pytest.fixture()
def notices(caplog, monkeypatch):
    """graphpar's log records of this test, one-time notices included (their memory is emptied for the test and
    the logger propagates to caplog even after graphpar installed its own handler)."""
    import logging

    from graphpar import _logging

    monkeypatch.setattr(_logging.logger, "propagate", True)
    monkeypatch.setattr(_logging, "_said", set())
    with caplog.at_level(logging.INFO, logger="graphpar"):
        yield caplog
