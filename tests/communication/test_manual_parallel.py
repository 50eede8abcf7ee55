"""STAND_ALONE manual parallel: collectives inside the network, one device per process, each rank training its own
weights (``compile/runtime/per_rank_train.py``).

The jobs run ``scripts/manual_parallel_train.py`` (a MindSpore-style tensor-parallel sample: column-parallel ``w1``,
row-parallel ``w2`` summed with ``AllReduce``, a whole ``w3`` on the hidden units gathered with ``AllGather``) and
compare every rank's losses and final weights with a one-process reference of the same math. MindSpore's gradient
rules for these collectives (AllReduce's gradient is the AllReduce of the incoming gradients, AllGather's the
ReduceScatter) give each rank the gradient of the sum of all ranks' losses with respect to its own weights, and
STAND_ALONE adds no reduction of its own: that is what the reference differentiates.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.communication.errors import CommunicationError
from graphpar.compile.runtime.per_rank_train import wants_per_rank_training
from tests.communication.scripts import manual_parallel_train as sample
from tests.communication.test_multiprocess import child_env, launch

SCRIPT = Path(sample.__file__)
LR, MOMENTUM, BATCH = sample.LR, sample.MOMENTUM, 4


def reference(size: int, epochs: int) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """Per-step losses ``(steps, size)`` and each rank's final weights, computed in one process: every rank's
    forward from all ranks' weights, each rank's gradient that of the sum of the ranks' losses, Momentum
    (``v = m * v + g; p -= lr * v``) per rank."""
    w1, w2, w3 = sample.global_weights()
    block = sample.HIDDEN // size
    params = [{"w1": w1[:, r * block:(r + 1) * block], "w2": w2[r * block:(r + 1) * block], "w3": w3}
              for r in range(size)]
    params = jax.tree.map(jnp.asarray, params)
    velocity = jax.tree.map(jnp.zeros_like, params)

    def losses(ps, x, y):
        hidden = [jax.nn.relu(x @ p["w1"]) for p in ps]
        row_parallel = sum(h @ p["w2"] for h, p in zip(hidden, ps))
        every = jnp.concatenate(hidden, axis=1)
        return jnp.stack([jnp.mean((row_parallel + every @ p["w3"] - y) ** 2) for p in ps])

    x_all, y_all = sample.data()
    out = []
    for _ in range(epochs):
        for i in range(len(x_all) // BATCH):
            x, y = x_all[i * BATCH:(i + 1) * BATCH], y_all[i * BATCH:(i + 1) * BATCH]
            out.append(np.asarray(losses(params, x, y)))
            grads = jax.grad(lambda ps: jnp.sum(losses(ps, x, y)))(params)
            velocity = jax.tree.map(lambda v, g: MOMENTUM * v + g, velocity, grads)
            params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)
    return np.stack(out), [{k: np.asarray(v) for k, v in p.items()} for p in params]


def parse(text: str) -> tuple[dict[int, dict[int, float]], dict[int, dict[str, np.ndarray]]]:
    """``{rank: {step: loss}}`` and ``{rank: {name: flat weights}}`` from a worker's output."""
    losses: dict[int, dict[int, float]] = {}
    params: dict[int, dict[str, np.ndarray]] = {}
    for rank, step, value in re.findall(r"^LOSS (\d+) (\d+) (\S+)$", text, re.M):
        losses.setdefault(int(rank), {})[int(step)] = float(value)
    for rank, name, values in re.findall(r"^PARAM (\d+) (\S+) (\[.*\])$", text, re.M):
        params.setdefault(int(rank), {})[name] = np.asarray(json.loads(values), np.float32)
    return losses, params


def check_job(texts: list[str], size: int, epochs: int, steps_reported: int) -> None:
    ref_losses, ref_params = reference(size, epochs)
    for rank, text in enumerate(texts):
        losses, params = parse(text)
        assert len(losses[rank]) == steps_reported, losses
        steps = sorted(losses[rank])
        np.testing.assert_allclose([losses[rank][s] for s in steps], ref_losses[np.asarray(steps) - 1, rank],
                                   rtol=1e-5, atol=1e-6)
        for name, value in ref_params[rank].items():
            np.testing.assert_allclose(params[rank][name], value.reshape(-1), rtol=1e-4, atol=1e-6)
    per_epoch = ref_losses.reshape(epochs, -1, size).mean(axis=(1, 2))
    assert per_epoch[-1] < 0.5 * per_epoch[0]  # the sample learns: its second epoch's loss is under half its first
    if size > 1:  # each rank holds and trains its own slice
        assert not np.allclose(ref_params[0]["w1"], ref_params[1]["w1"])


# --- one process ----------------------------------------------------------------------------------------------
class Reduced(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(4, 2)
        self.all_reduce = ops.AllReduce()

    def construct(self, x):
        return self.all_reduce(self.dense(x))


def test_stand_alone_with_collectives_selects_the_per_rank_step():
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    assert wants_per_rank_training(nn.WithLossCell(Reduced(), nn.MSELoss()))
    assert not wants_per_rank_training(nn.WithLossCell(nn.Dense(4, 2), nn.MSELoss()))  # no collective
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL)
    try:  # DATA_PARALLEL runs collectives in its own per-device loss (one value per Parameter)
        assert not wants_per_rank_training(nn.WithLossCell(Reduced(), nn.MSELoss()))
    finally:
        ms.reset_auto_parallel_context()


def test_process_driving_several_devices_is_refused_by_name():
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    net = nn.WithLossCell(Reduced(), nn.MSELoss())
    step = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    with pytest.raises(CommunicationError, match=r"drives 8 .*msrun --worker_num 8 --local_worker_num 8"):
        step(ms.Tensor(np.ones((2, 4), np.float32)), ms.Tensor(np.ones((2, 2), np.float32)))


def test_lone_process_of_one_device_is_a_job_of_one_rank():
    """No launcher: one process, one device; the collectives act over the one rank."""
    result = subprocess.run([sys.executable, str(SCRIPT), "2"], env=child_env(1), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    check_job([result.stdout], size=1, epochs=2, steps_reported=8)


PLAN_PER_RANK = """
import numpy as np
import graphpar as ms
from graphpar import nn
from graphpar.communication import get_rank, init
from graphpar.parallel import plan
from tests.communication.scripts.manual_parallel_train import ManualNet

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
init()
net = nn.WithLossCell(ManualNet(get_rank(), 1), nn.MSELoss())
step = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.01, 0.9))
try:
    plan(step, np.ones((4, 4), np.float32), np.ones((4, 1), np.float32))
except ms.parallel.plan_api.PlanError as error:
    print("REFUSED", error)
"""


def test_plan_of_a_per_rank_step_is_refused_by_name():
    """``graphpar.parallel.plan`` has nothing to show for a step that runs ``construct`` as written per rank."""
    result = subprocess.run([sys.executable, "-c", PLAN_PER_RANK], env=child_env(1), capture_output=True, text=True,
                            timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert "REFUSED graphpar.parallel.plan(TrainOneStepCell): parallel_mode=STAND_ALONE" in result.stdout
    assert "SEMI_AUTO_PARALLEL or AUTO_PARALLEL with shard() strategies" in result.stdout


# --- jobs of several processes --------------------------------------------------------------------------------
@pytest.mark.dist
@pytest.mark.parametrize("size,sink", [(2, False), (2, True), (4, False)])
def test_manual_parallel_job_matches_the_reference(tmp_path, size, sink):
    args = ["--nproc", str(size), "--devices-per-proc", "1", str(SCRIPT), "2"] + (["sink"] if sink else [])
    result = launch(args, tmp_path, timeout=300, DEVICE_TARGET="CPU")
    assert result.returncode == 0, result.stderr + result.stdout
    texts = [(tmp_path / "logs" / f"worker_{r}.log").read_text() for r in range(size)]
    check_job(texts, size=size, epochs=2, steps_reported=2 if sink else 8)  # sink: one line per epoch


@pytest.mark.dist
def test_a_checkpoint_of_per_rank_weights_is_refused_on_every_rank(tmp_path):
    """Each rank holds its own slice of w1: a graphpar checkpoint (one value per name, written by all processes
    together) would keep process 0's and give rank 1 rank 0's weights on reload, so every rank refuses by name."""
    args = ["--nproc", "2", "--devices-per-proc", "1", str(SCRIPT), "1", "save", str(tmp_path / "ckpt")]
    result = launch(args, tmp_path, timeout=300, DEVICE_TARGET="CPU")
    assert result.returncode == 0, result.stderr + result.stdout
    for rank in range(2):
        text = (tmp_path / "logs" / f"worker_{rank}.log").read_text()
        refused = re.search(r"^SAVE REFUSED (.*)$", text, re.M)
        assert refused, text
        assert "'w1' (and 1 more) has different values on the processes of this job" in refused.group(1)
        assert "np.save(" in refused.group(1)
    assert not (tmp_path / "ckpt" / "net.ckpt").exists()
