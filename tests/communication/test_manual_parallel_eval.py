"""STAND_ALONE manual parallel beyond ``Model.train``: an ``@ms.jit`` training step (MindSpore 2.x's functional
loop), an ``@ms.jit`` forward, ``Model.predict`` and ``Model.eval`` of a network with collectives in ``construct``
run once per rank, each process with its own Parameters, data and results (``compile/functional/per_rank.py``).

The job runs ``scripts/manual_parallel_functional.py`` on 2 processes of one device each (127.0.0.1) and compares
every rank's losses and final weights with the one-process reference of ``test_manual_parallel`` (each rank's
gradient that of the sum of all ranks' losses, as MindSpore's collective gradient rules give), and its forward
outputs and evaluation loss with the reference network evaluated at those weights. In one process driving several
devices the per-rank programs are refused by name, as per-rank training is."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.communication.errors import CommunicationError
from graphpar.train import Model
from tests.communication.scripts import manual_parallel_functional as script
from tests.communication.scripts import manual_parallel_train as sample
from tests.communication.test_manual_parallel import Reduced, check_job, reference
from tests.communication.test_multiprocess import launch


def _outputs(params: list[dict[str, np.ndarray]], x: np.ndarray) -> list[np.ndarray]:
    """Each rank's network output for ``x`` at the ranks' weights ``params`` (the sample's math in one process)."""
    hidden = [jax.nn.relu(x @ p["w1"]) for p in params]
    row_parallel = sum(h @ p["w2"] for h, p in zip(hidden, params))
    every = jnp.concatenate(hidden, axis=1)
    return [np.asarray(row_parallel + every @ p["w3"]) for p in params]


@pytest.mark.dist
def test_jit_step_jit_forward_predict_and_eval_run_per_rank(tmp_path):
    size, epochs = 2, 2
    args = ["--nproc", str(size), "--devices-per-proc", "1", script.__file__, str(epochs)]
    result = launch(args, tmp_path, timeout=300, DEVICE_TARGET="CPU")
    assert result.returncode == 0, result.stderr + result.stdout
    texts = [(tmp_path / "logs" / f"worker_{r}.log").read_text() for r in range(size)]
    check_job(texts, size=size, epochs=epochs, steps_reported=8)  # the @ms.jit step: losses and weights per rank
    _, params = reference(size, epochs)
    x, y = sample.data()
    expected = _outputs(params, x[:4])
    for rank, text in enumerate(texts):
        for kind in ("JIT", "PREDICT"):
            found = re.search(rf"^{kind} {rank} (\[.*\])$", text, re.M)
            assert found, text
            np.testing.assert_allclose(json.loads(found.group(1)), expected[rank].reshape(-1), rtol=1e-5, atol=1e-6)
        batches = [np.mean((_outputs(params, x[i:i + 4])[rank] - y[i:i + 4]) ** 2) for i in range(0, len(x), 4)]
        found = re.search(rf"^EVAL {rank} (\S+)$", text, re.M)
        assert found, text
        assert float(found.group(1)) == pytest.approx(float(np.mean(batches)), rel=1e-5)


def test_per_rank_eval_and_jit_in_a_process_driving_several_devices_are_refused_by_name():
    """As per-rank training: each rank would need its own value of one Parameter, which one process cannot hold."""
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    net = Reduced()
    x, y = np.ones((2, 4), np.float32), np.ones((2, 2), np.float32)
    with pytest.raises(CommunicationError, match=r"drives 8 .*msrun --worker_num 8 --local_worker_num 8"):
        Model(net, nn.MSELoss(), metrics={"loss"}).predict(ms.Tensor(x))
    optimizer = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    grad_fn = ms.value_and_grad(lambda a, b: nn.MSELoss()(net(a), b), None, optimizer.parameters)

    @ms.jit
    def train_step(a, b):
        loss, grads = grad_fn(a, b)
        optimizer(grads)
        return loss

    with pytest.raises(CommunicationError, match=r"Reduced \(all_reduce\).*drives 8"):
        train_step(ms.Tensor(x), ms.Tensor(y))
