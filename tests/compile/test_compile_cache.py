"""XLA's persistent compilation cache: on by default in the user's cache directory, switched and moved as
MindSpore's ``set_context(enable_compile_cache=..., compile_cache_path=...)`` and ``MS_COMPILER_CACHE_ENABLE`` /
``MS_COMPILER_CACHE_PATH``; a second run of a script reads its train step back instead of compiling it.

(The suite runs with the cache off, ``tests/conftest.py``; these tests switch it on in temporary directories.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import _context, nn, ops
from graphpar.compile.staging.xla_cache import CACHES_HOST_CALLBACKS, has_filelock, use_persistent_cache
from graphpar.errors import ConfigError, EnvVarError

ROOT = Path(__file__).resolve().parents[2]


def _entries(folder: Path) -> list[str]:
    """XLA's entries for train steps (JAX's bounded cache keeps an access-time file beside each: not counted)."""
    return sorted(p.name for p in folder.glob("jit_step-*-cache")) if folder.is_dir() else []


def _stored(root: Path) -> list[str]:
    """Train steps stored under a compile-cache root: in XLA's cache, and in graphpar's executable cache (a step
    whose train cell and optimizer graphpar can describe: ``compile.staging.executables``)."""
    return _entries(root / "xla") + sorted(p.name for p in (root / "steps").glob("*.exe"))


def test_where_the_cache_lives(monkeypatch, tmp_path):
    """Default: on, in $XDG_CACHE_HOME/graphpar/xla (~/.cache without it); MindSpore's variables move and switch
    it; set_context takes precedence over them, as MindSpore documents."""
    for name in ("MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _context.compile_cache() == _context.CompileCache(True, str(tmp_path / "home/.cache/graphpar/xla"), False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _context.compile_cache().directory == str(tmp_path / "xdg/graphpar/xla")
    monkeypatch.setenv("MS_COMPILER_CACHE_PATH", str(tmp_path / "ms"))
    monkeypatch.setenv("MS_COMPILER_CACHE_ENABLE", "0")
    assert _context.compile_cache() == _context.CompileCache(False, str(tmp_path / "ms/xla"), True)
    ms.set_context(enable_compile_cache=True, compile_cache_path=str(tmp_path / "mine"))
    assert _context.compile_cache() == _context.CompileCache(True, str(tmp_path / "mine/xla"), True)
    assert ms.get_context("enable_compile_cache") is True
    assert ms.get_context("compile_cache_path") == str(tmp_path / "mine")


def test_bad_settings_are_refused_by_name(monkeypatch):
    with pytest.raises(ConfigError, match="enable_compile_cache must be a bool"):
        ms.set_context(enable_compile_cache=1)
    with pytest.raises(ConfigError, match="compile_cache_path must be a non-empty string"):
        ms.set_context(compile_cache_path="")
    monkeypatch.setenv("MS_COMPILER_CACHE_ENABLE", "sometimes")
    with pytest.raises(EnvVarError, match="MS_COMPILER_CACHE_ENABLE"):
        _context.compile_cache()


@pytest.fixture()
def every_program_cached():
    """JAX writes programs that compiled for at least jax_persistent_cache_min_compile_time_secs (graphpar's
    default 0.1 s): 0 here, so a tiny step is written whatever the machine's load. Afterwards the cache is off
    again for the rest of the suite."""
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield
    ms.set_context(enable_compile_cache=False)
    use_persistent_cache("the next test")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def _mlp_step(batch: int) -> float:
    net = nn.Dense(6, 3)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    return float(train(np.ones((batch, 6), np.float32), np.zeros((batch, 3), np.float32)))


def test_steps_are_written_where_set_context_says_and_not_once_switched_off(tmp_path, notices,
                                                                            every_program_cached):
    ms.set_context(enable_compile_cache=True, compile_cache_path=str(tmp_path))
    _mlp_step(8)
    written = _stored(tmp_path)
    assert len(_entries(tmp_path / "xla")) == 1 and len(written) == 2, written  # XLA's entry and graphpar's
    said = [r.getMessage() for r in notices.records if "compiled programs are cached in" in r.getMessage()]
    assert len(said) == 1 and str(tmp_path / "xla") in said[0] and notices.records[0].levelname == "INFO"
    bounds = "at most 4 GiB in all" if has_filelock() else "train steps at most 2 GiB"  # graphpar's default bound
    assert f"{bounds}, least recently used dropped first" in said[0]
    ms.set_context(enable_compile_cache=False)
    _mlp_step(16)  # another batch shape: another program, compiled and not written
    assert _stored(tmp_path) == written


def test_a_step_with_labels_from_the_batch_is_stored(tmp_path, every_program_cached):
    """Sparse labels taken from the batch are checked beside the step (ops.runtime_checks), not by a host callback
    in it, so the usual classifier's step is written to the cache like any other."""
    ms.set_context(enable_compile_cache=True, compile_cache_path=str(tmp_path))
    net = nn.Dense(6, 3)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.SGD(net.trainable_params(), 0.1))
    assert np.isfinite(float(train(np.ones((8, 6), np.float32), np.zeros(8, np.int32))))
    assert _stored(tmp_path) != []


class _CastLabels(nn.Cell):
    """Labels the network computes (a Cast): their check stays in the program, as a host callback."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(6, 3)
        self.cast = ops.Cast()
        self.ce = ops.SparseSoftmaxCrossEntropyWithLogits()

    def construct(self, x, labels):
        return self.ce(self.dense(x), self.cast(labels, ms.int32))


def test_a_step_that_calls_back_to_the_host_is_named_once_where_jax_does_not_cache_it(tmp_path, notices,
                                                                                      every_program_cached):
    """JAX before 0.11 never writes a program with a host callback to its cache: graphpar says so instead of leaving
    the user to wonder why the next run compiles again; from 0.11 on it is stored and nothing is said."""
    ms.set_context(enable_compile_cache=True, compile_cache_path=str(tmp_path))
    net = _CastLabels()
    train = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), 0.1))
    assert np.isfinite(float(train(np.ones((8, 6), np.float32), np.zeros(8, np.int64))))
    said = [r.getMessage() for r in notices.records if "not stored in XLA's persistent" in r.getMessage()]
    if CACHES_HOST_CALLBACKS:
        assert _entries(tmp_path / "xla") != [] and said == []
    else:
        assert _entries(tmp_path / "xla") == []
        assert len(said) == 1 and "calls back to the host (DebugEffect" in said[0], said


_SCRIPT = """
import json, logging, sys, time
import numpy as np
import graphpar as ms
from graphpar import nn, ops

hits = []

class Hits(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("Persistent compilation cache hit"):
            hits.append(record.args[0])

logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
logging.getLogger("jax._src.compiler").addHandler(Hits())
class Train(nn.TrainOneStepCell):
    # a train cell of the script's own class: graphpar's executable cache does not describe it, XLA's cache serves
    # it (tests/compile/test_executable_cache.py: a graphpar train cell's step)
    pass

ms.set_seed(0)
ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
net = nn.SequentialCell([nn.Dense(16, 32, activation="relu"), nn.Dense(32, 4)])
train = Train(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
started = time.perf_counter()
loss = float(train(np.ones((16, 16), np.float32), np.zeros((16, 4), np.float32)))
print(json.dumps({"hits": hits, "loss": loss, "first_step_s": time.perf_counter() - started}))
"""


def test_a_second_run_of_a_script_reads_its_step_back(tmp_path):
    """MS_COMPILER_CACHE_ENABLE=1 / MS_COMPILER_CACHE_PATH, as a MindSpore user sets them: the first run writes the
    train step to XLA's cache (the script's own train cell class), the second finds it (a cache hit, no new entry)
    and trains to the same loss."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MS_COMPILER_CACHE_ENABLE": "1",
           "MS_COMPILER_CACHE_PATH": str(tmp_path), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    written = _entries(tmp_path / "xla")
    assert first["hits"] == [] and len(written) == 1, (first, written)
    second = run()
    assert second["hits"] == ["jit_step"] and _entries(tmp_path / "xla") == written
    assert second["loss"] == first["loss"]
