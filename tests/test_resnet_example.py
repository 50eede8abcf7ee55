"""examples/resnet50_cifar10.py (seeds 000/001/003) end to end on data written by examples/make_cifar_like.py, in
both of the tutorials' parallel modes (a narrow ResNet-18, 32×32 images, two short epochs)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is (\d+\.\d+(?:e-?\d+)?)$")


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    out = tmp_path_factory.mktemp("cifar")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "make_cifar_like.py"), "--out", str(out),
                           "--train", "400", "--test", "40"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out / "cifar-10-batches-bin"


def _run(args, env_extra=None):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", GRAPHPAR_PROGRESS="0",
               **(env_extra or {}))
    return subprocess.run([sys.executable, str(ROOT / "examples" / "resnet50_cifar10.py"), *args],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("mode", ["data", "auto"])
def test_example_trains_in_both_modes(cifar, mode):
    proc = _run(["--data-path", str(cifar), "--parallel-mode", mode, "--arch", "resnet18", "--image-size", "32",
                 "--width", "0.125", "--batch-size", "2", "--steps-per-epoch", "2", "--epochs", "2"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [l for l in proc.stdout.splitlines() if l.startswith("epoch")]
    parsed = [LINE.match(l) for l in lines]
    assert len(lines) == 2 and all(parsed), proc.stdout  # sink mode: one line per epoch, as the tutorials' logs
    assert [(int(m.group(1)), int(m.group(2))) for m in parsed] == [(1, 2), (2, 2)]
    assert all(0 < float(m.group(3)) < 5 for m in parsed)


def test_example_reads_data_path_from_the_environment(cifar):
    proc = _run(["--arch", "resnet18", "--image-size", "32", "--width", "0.125", "--batch-size", "2",
                 "--steps-per-epoch", "1", "--epochs", "1"], {"DATA_PATH": str(cifar)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "epoch: 1 step: 1, loss is" in proc.stdout


def test_example_without_data_says_how_to_get_some():
    env = {k: v for k, v in os.environ.items() if k != "DATA_PATH"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "resnet50_cifar10.py")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode != 0 and "--data-path" in proc.stderr and "make_cifar_like.py" in proc.stderr
