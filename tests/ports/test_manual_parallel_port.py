"""MindSpore's manual-parallel sample (scripts/manual_parallel_port.py) launched as the guide launches it, through
``msrun`` with 8 processes of one device each on 127.0.0.1, imports changed only, checked for the guide's claims:
each rank trains on its own slice of the batch, the loss cell's AllReduce gives every rank the same mean loss, and
that loss falls."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphpar.communication.process_plan import free_port
from tests.api2x.test_mnist_functional_loop import _mnist_train
from tests.communication.test_multiprocess import child_env

SCRIPT = Path(__file__).parent / "scripts" / "manual_parallel_port.py"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.dist
def test_manual_parallel_sample_under_msrun_8x1(tmp_path):
    data = _mnist_train(tmp_path)
    command = [str(Path(sys.executable).parent / "msrun"), "--worker_num", "8", "--local_worker_num", "8",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--log_dir", str(tmp_path / "logs"),
               "--join", "True", str(SCRIPT)]
    env = child_env(1, DATA_PATH=str(data), PYTHONPATH=str(ROOT))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = []
    for rank in range(8):
        log = (tmp_path / "logs" / f"worker_{rank}.log").read_text()
        losses.append([float(v) for v in re.findall(r"epoch: \d+ step: \d+, loss is (\S+)", log)])
    assert all(len(rank_losses) == 8 for rank_losses in losses), losses
    for rank_losses in losses[1:]:  # the all-reduced mean: the same on every rank
        assert rank_losses == pytest.approx(losses[0], rel=1e-5)
    assert losses[0][-1] < 0.5 * losses[0][0]
