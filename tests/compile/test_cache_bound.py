"""The compile cache is bounded on disk: ``GRAPHPAR_COMPILE_CACHE_MAX_SIZE`` (4 GiB by default; MindSpore's compile
cache has no bound) is split between XLA's folder, bounded by JAX's own ``jax_compilation_cache_max_size``, and
graphpar's ``steps`` folder (``compile.staging.entry_files``); each drops its least recently used entries first.
Processes sharing the folder never read half an entry.

(The suite runs with the cache off, ``tests/conftest.py``; these tests switch it on in temporary directories.)"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import _context, nn
from graphpar._context.cache_dir import DEFAULT_MAX_BYTES
from graphpar.compile.staging import entry_files, xla_cache
from graphpar.compile.staging.xla_cache import use_persistent_cache
from graphpar.errors import EnvVarError

MAGIC = b"test-entry-1\n"


@pytest.mark.parametrize("value, expected", [("4GB", 4 << 30), ("512MB", 512 << 20), ("1.5GiB", 3 << 29),
                                             ("100000", 100000), ("64 kb", 64 << 10), ("-1", -1)])
def test_the_bound_is_read_from_graphpars_variable(monkeypatch, value, expected):
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", value)
    choice = _context.compile_cache()
    assert choice.max_bytes == expected
    assert choice.folder_max_bytes == (-1 if expected < 0 else expected // 2)  # half for XLA's, half for steps


def test_the_default_bound_is_4_gib_split_between_the_two_folders(monkeypatch):
    monkeypatch.delenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", raising=False)
    choice = _context.compile_cache()
    assert choice.max_bytes is None and DEFAULT_MAX_BYTES == 4 << 30 and choice.folder_max_bytes == 2 << 30


@pytest.mark.parametrize("value", ["0", "lots", "-5", "4PB", "1e9", "0.1"])
def test_a_bound_that_is_no_size_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", value)
    with pytest.raises(EnvVarError, match=r"GRAPHPAR_COMPILE_CACHE_MAX_SIZE=.*must be a size on disk.*4GB.*-1"):
        _context.compile_cache()


def _payload(key: str, size: int) -> bytes:
    return (key.encode() * (size // len(key) + 1))[:size]


def _aged(path: Path, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    os.utime(path, (stamp, stamp))


def test_the_least_recently_used_entries_are_dropped_first(tmp_path):
    """Written a, b, c (oldest first), then a read: a is the most recently used, so a bound of two entries keeps
    a and c. The entry just written is never dropped."""
    for age, key in ((30, "a"), (20, "b"), (10, "c")):
        _aged(entry_files.write(tmp_path, key, MAGIC, _payload(key, 1000)), age)
    assert entry_files.read(tmp_path / "a.exe", MAGIC) == _payload("a", 1000)  # a hit moves its time to now
    dropped = entry_files.evict(tmp_path, 2 * (1000 + len(MAGIC) + 32))
    assert [p.name for p in dropped] == ["b.exe"] and sorted(p.name for p in tmp_path.iterdir()) == ["a.exe", "c.exe"]
    written = entry_files.write(tmp_path, "d", MAGIC, _payload("d", 5000))  # alone over the bound: kept
    assert [p.name for p in entry_files.evict(tmp_path, 1000, keep=written)] == ["c.exe", "a.exe"]
    assert [p.name for p in tmp_path.iterdir()] == ["d.exe"] and entry_files.size(tmp_path) == written.stat().st_size


def test_a_temporary_file_left_by_a_killed_writer_is_removed(tmp_path):
    (tmp_path / "xyz.tmp").write_bytes(b"half")
    _aged(tmp_path / "xyz.tmp", entry_files.ORPHAN_SECONDS + 1)
    (tmp_path / "live.tmp").write_bytes(b"being written")
    entry_files.evict(tmp_path, -1)  # no bound: still tidied
    assert [p.name for p in tmp_path.iterdir()] == ["live.tmp"]


_WORKER = """
import importlib.util, json, random, sys, time
from pathlib import Path
spec = importlib.util.spec_from_file_location("entry_files", sys.argv[1])
ef = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ef)
folder, role, seed = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
magic, keys = b"test-entry-1\\n", [f"k{i}" for i in range(12)]
rng = random.Random(seed)
def payload(key):  # the same bytes for a key in every process; 64-512 KiB, so writes take a while
    size = (64 + 448 * (int(key[1:]) % 5) // 4) << 10
    return (key.encode() * size)[:size]
counts = {"hits": 0, "misses": 0, "wrong": 0, "damaged": 0, "writes": 0}
deadline = time.monotonic() + 2.0
while time.monotonic() < deadline:
    key = rng.choice(keys)
    if role == "writer":
        path = ef.write(folder, key, magic, payload(key))
        ef.evict(folder, 1 << 20, keep=path)  # about four entries
        counts["writes"] += 1
    else:
        got = ef.read(folder / f"{key}.exe", magic)
        if got is None:
            counts["misses"] += 1
        elif isinstance(got, str):
            counts["damaged"] += 1
        else:
            counts["hits" if got == payload(key) else "wrong"] += 1
print(json.dumps(counts))
"""


def test_processes_sharing_the_folder_never_read_half_an_entry(tmp_path):
    """Two processes write and evict under a bound of about four entries while two read, for two seconds: every
    read is a whole entry or a miss, none is damaged (half-written or half-dropped) or another entry's."""
    module = Path(entry_files.__file__)
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(module), str(tmp_path), role, str(seed)],
                              stdout=subprocess.PIPE, text=True)
             for seed, role in enumerate(["writer", "writer", "reader", "reader"])]
    results = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    writers, readers = results[:2], results[2:]
    assert all(w["writes"] > 0 for w in writers), results
    assert sum(r["hits"] for r in readers) > 0 and sum(r["misses"] for r in readers) > 0, results
    assert all(r["wrong"] == 0 and r["damaged"] == 0 for r in readers), results
    assert entry_files.size(tmp_path) <= (1 << 20) + (512 << 10) + 64  # the bound, and at most the newest entry
    assert not list(tmp_path.glob("*.tmp"))


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """The compile cache on in a temporary directory with a bound from GRAPHPAR_COMPILE_CACHE_MAX_SIZE."""
    before = jax.config.jax_persistent_cache_min_compile_time_secs, jax.config.jax_compilation_cache_max_size
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)  # XLA's cache writes nothing here
    ms.set_context(enable_compile_cache=True, compile_cache_path=str(tmp_path))
    yield tmp_path
    ms.set_context(enable_compile_cache=False)
    use_persistent_cache("the next test")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[0])
    jax.config.update("jax_compilation_cache_max_size", before[1])


def _train_step(batch: int) -> None:
    net = nn.Dense(6, 3)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    assert np.isfinite(float(train(np.ones((batch, 6), np.float32), np.zeros((batch, 3), np.float32))))


def test_the_steps_folder_keeps_the_newest_steps_under_its_bound(cache, monkeypatch, notices):
    _train_step(8)
    (first,) = (cache / "steps").glob("*.exe")
    size = first.stat().st_size
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", str(3 * size))  # 1.5 entries per folder
    _aged(first, 60)
    _train_step(16)  # another program: stored, and the older one dropped
    (second,) = (cache / "steps").glob("*.exe")
    assert second != first
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", str(size))  # half an entry per folder: not stored
    _train_step(24)
    assert list((cache / "steps").glob("*.exe")) == [second]
    said = [r.getMessage() for r in notices.records if "exceed the folder's bound" in r.getMessage()]
    assert len(said) == 1 and f"bound of {size // 2} bytes" in said[0], said


def test_xlas_folder_is_bounded_with_jaxs_own_mechanism(cache, monkeypatch, notices):
    """With filelock (a dependency), JAX bounds XLA's folder; an entry an earlier unbounded run wrote gets the
    access-time file JAX's eviction needs. The announcement says the bound once."""
    pytest.importorskip("filelock")
    monkeypatch.setattr(xla_cache, "has_filelock", lambda: True)
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", "1GB")
    (cache / "xla").mkdir()
    (cache / "xla" / "jit_earlier-0123-cache").write_bytes(b"written by an unbounded run")
    use_persistent_cache("a step")
    assert jax.config.jax_compilation_cache_max_size == 512 << 20
    assert (cache / "xla" / "jit_earlier-0123-atime").exists()
    said = [r for r in notices.records if "compiled programs are cached in" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "INFO"
    assert "at most 1 GiB in all, least recently used dropped first" in said[0].getMessage()
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # XLA's cache writes every step
    _train_step(8)
    (first,) = (cache / "xla").glob("jit_step-*-cache")
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", str(3 * first.stat().st_size))  # 1.5 entries a folder
    _train_step(16)  # JAX drops the older entry to make room
    (second,) = (cache / "xla").glob("jit_step-*-cache")
    assert second != first


def test_without_filelock_xlas_folder_is_left_unbounded_and_the_announcement_says_so(cache, monkeypatch, notices):
    monkeypatch.setattr(xla_cache, "has_filelock", lambda: False)
    use_persistent_cache("a step")
    assert jax.config.jax_compilation_cache_max_size == -1
    (said,) = [r for r in notices.records if "compiled programs are cached in" in r.getMessage()]
    assert "train steps at most 2 GiB, least recently used dropped first; XLA's folder" in said.getMessage()
    assert "is not bounded: JAX bounds it only with the filelock package" in said.getMessage()
    assert said.levelname == "INFO"  # graphpar's default bound; a bound the user set is a warning
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", "2GB")
    ms.set_context(compile_cache_path=str(cache / "other"))
    use_persistent_cache("a step")
    assert [r.levelname for r in notices.records if "is not bounded" in r.getMessage()] == ["INFO", "WARNING"]


def test_a_jax_bound_of_the_users_own_is_kept_unless_graphpars_variable_is_set(cache, monkeypatch, notices):
    monkeypatch.setattr(xla_cache, "has_filelock", lambda: True)
    monkeypatch.delenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", raising=False)
    jax.config.update("jax_compilation_cache_max_size", 123 << 20)
    use_persistent_cache("a step")
    assert jax.config.jax_compilation_cache_max_size == 123 << 20
    (said,) = [r.getMessage() for r in notices.records if "compiled programs are cached in" in r.getMessage()]
    assert "train steps at most 2 GiB, XLA's at most 123 MiB (jax_compilation_cache_max_size)" in said
    monkeypatch.setenv("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", "100MB")
    use_persistent_cache("a step")
    assert jax.config.jax_compilation_cache_max_size == 50 << 20
