"""graphpar's executable cache (``compile.staging.executables``): with the compile cache on, a train step is stored
keyed by what it is made of (the planned graph, the train cell and optimizer, the signature, the environment, the
code), so a later run (or a later train cell built the same way) loads it and skips the autodiff trace, the lowering
and XLA. Anything that changes the program misses; a damaged file is a miss with a notice.

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
from graphpar import nn, ops
from graphpar.compile.staging import prefetch
from graphpar.compile.staging.xla_cache import use_persistent_cache

ROOT = Path(__file__).resolve().parents[2]
X = np.linspace(-1, 1, 16 * 8, dtype=np.float32).reshape(16, 8)
Y = np.linspace(0, 1, 16 * 4, dtype=np.float32).reshape(16, 4)


class _Net(nn.Cell):
    def __init__(self, strategy=None):
        super().__init__()
        self.dense = nn.Dense(8, 4)
        self.matmul = ops.MatMul()
        if strategy is not None:
            self.matmul.shard(strategy)
        self.w = ms.Parameter(np.full((4, 4), 0.1, np.float32), name="w")
        self.act = ops.ReLU()

    def construct(self, x):
        return self.matmul(self.act(self.dense(x)), self.w)


class _TanhNet(_Net):
    """The same parameters, another construct."""

    def __init__(self):
        super().__init__()
        self.act = ops.Tanh()


def _train(net=None, lr=0.1, optimizer=nn.Momentum, scale=None):
    ms.set_seed(0)
    net = net if net is not None else _Net()
    opt = optimizer(net.trainable_params(), lr, 0.9) if optimizer is nn.Momentum else optimizer(
        net.trainable_params(), lr)
    loss = nn.WithLossCell(net, nn.MSELoss())
    if scale is None:
        return nn.TrainOneStepCell(loss, opt)
    return nn.TrainOneStepWithLossScaleCell(loss, opt, nn.FixedLossScaleUpdateCell(scale))


def _step(train) -> tuple[int, list[float]]:
    """(steps loaded from the executable cache, two losses)."""
    losses = [float(np.asarray(train(X, Y)[0] if isinstance(train, nn.TrainOneStepWithLossScaleCell) else
                               train(X, Y))) for _ in range(2)]
    return train.program.counts.loads, losses


@pytest.fixture()
def cache(tmp_path):
    """The compile cache on in a temporary directory; XLA's cache writes nothing (a tiny step compiles in under its
    minimum time or not, as the machine's load has it), so every step compiled here is compiled, not read back."""
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)
    ms.set_context(enable_compile_cache=True, compile_cache_path=str(tmp_path))
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=True)
    yield tmp_path / "steps"
    ms.set_context(enable_compile_cache=False)
    use_persistent_cache("the next test")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def test_a_train_cell_built_the_same_way_loads_the_step_and_trains_alike(cache):
    loads, losses = _step(_train())
    assert loads == 0 and len(list(cache.glob("*.exe"))) == 1
    again = _train()
    loads, same = _step(again)
    assert loads == 1 and same == losses
    counts = again.program.counts
    assert (counts.traces, counts.lowerings, counts.compiles) == (1, 0, 0)  # traced and planned, not lowered
    # the stages stay inspectable: the lowered stage is made on request, the compiled one is the loaded program
    stages = again.program.stages([X, Y])
    assert stages.compiled.lowered is None and "sharding" in stages.lowered.as_text()
    assert "HloModule" in stages.compiled.as_text()


def test_the_next_run_reads_the_step_while_its_network_is_traced(cache):
    """``staging.prefetch``: the key a step was stored under is remembered for what is known before tracing (the
    program, the batch, the settings, the state's shapes), so the next train cell built the same way starts reading
    that executable at once; it is taken because the key computed after planning is the same."""
    _, losses = _step(_train())
    (exe,), (index,) = cache.glob("*.exe"), cache.glob("*.next")
    assert index.read_text() == exe.stem
    again = _train()
    assert _step(again) == (1, losses) and again.program.counts.prefetched == 1


def test_with_one_core_the_step_is_read_after_planning(cache, monkeypatch):
    """Where the process may use one core only, a read on another thread could overlap nothing: the step is read
    in order, after its key is known (the guess is still remembered for a later run with more cores)."""
    _, losses = _step(_train())
    monkeypatch.setattr(prefetch, "usable_cores", lambda: 1)
    again = _train()
    assert _step(again) == (1, losses) and again.program.counts.prefetched == 0


def test_a_wrong_guess_is_dropped_and_the_right_step_runs(cache):
    """Another ``construct`` with the same parameters and batch has the same hint, so the guess reads the first
    network's executable; its key differs after planning, so the guess is dropped and the step compiled (then
    remembered); the first network is then found by its own key, without the guess."""
    _, losses = _step(_train())
    (relu_exe,) = cache.glob("*.exe")
    tanh = _train(_TanhNet())
    loads, tanh_losses = _step(tanh)
    assert (loads, tanh.program.counts.prefetched, tanh.program.counts.compiles) == (0, 0, 1)
    assert tanh_losses != losses
    (index,) = cache.glob("*.next")
    assert len(list(cache.glob("*.exe"))) == 2 and index.read_text() != relu_exe.stem  # the guess is now tanh's
    relu = _train()
    assert _step(relu) == (1, losses) and relu.program.counts.prefetched == 0
    assert index.read_text() == relu_exe.stem  # and back to the step that ran last
    again = _train()
    assert _step(again) == (1, losses) and again.program.counts.prefetched == 1


@pytest.mark.parametrize("change", ["lr", "optimizer", "loss scale", "strategy", "construct"])
def test_what_changes_the_program_misses(cache, change):
    _step(_train(_Net(((8, 1), (1, 1)))))
    made = {"lr": lambda: _train(_Net(((8, 1), (1, 1))), lr=0.05),
            "optimizer": lambda: _train(_Net(((8, 1), (1, 1))), optimizer=nn.SGD),
            "loss scale": lambda: _train(_Net(((8, 1), (1, 1))), scale=8.0),
            "strategy": lambda: _train(_Net(((2, 1), (1, 4)))),
            "construct": lambda: _train(_TanhNet())}[change]()
    loads, _ = _step(made)
    assert loads == 0 and len(list(cache.glob("*.exe"))) == 2


class _MyTrainCell(nn.TrainOneStepCell):
    """A user's train cell class: graphpar cannot describe what it may override."""


def test_a_train_cell_of_the_users_own_class_is_left_to_xlas_cache(cache, notices):
    net = _Net()
    train = _MyTrainCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    assert _step(train)[0] == 0 and not cache.exists()
    said = [r.getMessage() for r in notices.records if "not kept in graphpar's executable cache" in r.getMessage()]
    assert len(said) == 1 and "_MyTrainCell" in said[0], said


@jax.custom_vjp
def _clipped_relu(x):
    return jax.numpy.maximum(x, 0.0)


def _clipped_relu_fwd(x):
    return _clipped_relu(x), x


def _clipped_relu_bwd(x, g):  # a derivative rule of the user's: the printed jaxpr names it, never shows its body
    return (jax.numpy.where(x > 0, jax.numpy.clip(g, -1.0, 1.0), 0.0),)


_clipped_relu.defvjp(_clipped_relu_fwd, _clipped_relu_bwd)


class _CustomGradNet(_Net):
    def construct(self, x):
        return self.matmul(_clipped_relu(self.dense(x)), self.w)


def test_a_derivative_rule_of_the_users_own_is_left_to_xlas_cache(cache, notices):
    """Editing ``_clipped_relu_fwd`` or ``_bwd`` would leave the traced graph as it is: the step is not stored, and
    the notice names the first rule it met."""
    assert _step(_train(_CustomGradNet()))[0] == 0 and not list(cache.glob("*.exe"))
    said = [r.getMessage() for r in notices.records if "not kept in graphpar's executable cache" in r.getMessage()]
    assert len(said) == 1 and "custom_vjp_call rule" in said[0] and "_clipped_relu_" in said[0], said


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "not an executable"])
def test_a_damaged_file_is_a_miss_with_a_notice_and_is_rewritten(cache, notices, damage):
    _, losses = _step(_train())
    (path,) = cache.glob("*.exe")
    blob = path.read_bytes()
    path.write_bytes({"truncated": blob[: len(blob) // 2],
                      "flipped byte": blob[:-100] + bytes([blob[-100] ^ 0xFF]) + blob[-99:],
                      "not an executable": b"hello"}[damage])
    loads, again = _step(_train())
    assert loads == 0 and again == losses
    said = [r.getMessage() for r in notices.records if "cached step executable" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0] and "compiled again" in said[0], said
    assert path.read_bytes() != b"hello" and _step(_train())[0] == 1  # rewritten, and read next time


def test_a_step_read_back_from_xlas_cache_is_not_stored(cache):
    """XLA:CPU keeps no kernels for an executable it read back from its cache, so serialised again it would fail
    when it runs: such a step is not stored (it is after a compile XLA's cache does not serve)."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # XLA's cache writes every program
    _, losses = _step(_train())
    (path,) = cache.glob("*.exe")
    path.unlink()
    loads, again = _step(_train())  # compiled by reading XLA's cache
    assert loads == 0 and again == losses and list(cache.glob("*.exe")) == []


_SCRIPT = """
import json
import numpy as np
import graphpar as ms
from graphpar import nn

ms.set_seed(0)
ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=True)
net = nn.SequentialCell([nn.Dense(16, 32, activation="relu"), nn.Dense(32, 4)])
train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Adam(net.trainable_params(), 0.01))
x, y = np.linspace(-1, 1, 256, dtype=np.float32).reshape(16, 16), np.zeros((16, 4), np.float32)
losses = [float(train(x, y)) for _ in range(3)]
counts = train.program.counts
print(json.dumps({"losses": losses, "loads": counts.loads, "compiles": counts.compiles}))
"""


def test_a_second_run_of_a_script_loads_its_step(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MS_COMPILER_CACHE_ENABLE": "1",
           "MS_COMPILER_CACHE_PATH": str(tmp_path)}

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    assert (first["loads"], first["compiles"]) == (0, 1)
    second = run()
    assert (second["loads"], second["compiles"]) == (1, 0)
    assert second["losses"] == first["losses"]
