"""The documentation's data-parallel functional loop on ``MNIST_Data/train/`` (tests/api2x/scripts), imports changed
only: the loss falls, and DATA_PARALLEL with the grad reducer and loss scaling trains exactly as STAND_ALONE
(``gradients_mean=True``: the reducer must not reduce twice; the scaler changes nothing but the scale)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).parent / "scripts" / "mnist_functional_loop.py"
ROOT = Path(__file__).resolve().parents[2]


def _write_idx(path: Path, array: np.ndarray, magic: int) -> None:
    path.write_bytes(np.array([magic, *array.shape], dtype=">u4").tobytes() + array.astype(np.uint8).tobytes())


def _mnist_train(root: Path) -> Path:
    """32 images whose label is the row of their bright stripe: a pattern the network learns in a few steps."""
    train = root / "MNIST_Data" / "train"
    train.mkdir(parents=True)
    labels = np.arange(32) % 10
    images = np.zeros((32, 28, 28), np.uint8)
    for i, label in enumerate(labels):
        images[i, 2 * label:2 * label + 3, :] = 255
    _write_idx(train / "train-images-idx3-ubyte", images, 2051)
    _write_idx(train / "train-labels-idx1-ubyte", labels, 2049)
    return train


def _run(data: Path, *args: str) -> list[dict]:
    env = {**os.environ, "DATA_PATH": str(data), "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow  # a subprocess and two training runs: ~10 s on an idle 2-core machine
def test_functional_loop_on_mnist_train_dir(tmp_path):
    data = _mnist_train(tmp_path)
    alone, scaled = _run(data, "stand_alone", "data_parallel:scaled")
    assert len(alone["losses"]) == 6 and alone["losses"][-1] < 0.5 * alone["losses"][0]
    np.testing.assert_allclose(scaled["losses"], alone["losses"], rtol=1e-5)
    assert scaled["scale"] == 2**10 * 2  # one window of 4 finite steps in 6: the scale doubled once
