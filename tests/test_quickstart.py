"""The seed quickstart (examples/quickstart.py) end to end on 8 simulated devices: MindSpore's log lines, its
propagated plan in the begin dump, and rank 0's / rank 4's compiled collectives in the execute dumps."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^epoch: (\d) step: (\d), loss is (\d+\.\d+(?:e-?\d+)?)$")


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    dumps = tmp_path_factory.mktemp("qs") / "ir_dumps"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", SAVE_GRAPHS_PATH=str(dumps))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, dumps


def test_twenty_loss_monitor_lines_with_falling_loss(quickstart):
    stdout, _ = quickstart
    lines = [l for l in stdout.splitlines() if l.startswith("epoch")]
    assert len(lines) == 20
    parsed = [LINE.match(l) for l in lines]
    assert all(parsed), lines
    assert [(int(m.group(1)), int(m.group(2))) for m in parsed] == [(e, s) for e in range(1, 6) for s in range(1, 5)]
    assert float(parsed[-1].group(3)) < float(parsed[0].group(3))


def _node_line(text: str, instance: str) -> str:
    return next(l for l in text.splitlines() if f"{{instance name: {instance}}}" in l)


def test_begin_dump_shows_hinted_and_propagated_strategies(quickstart):
    _, dumps = quickstart
    for rank in range(8):
        assert (dumps / f"rank_{rank}" / "step_parallel_begin_0000.ir").is_file()
    text = (dumps / "rank_0" / "step_parallel_begin_0000.ir").read_text()
    matmul = _node_line(text, "matmul")
    assert "MatMul(" in matmul and "{in_strategy: ((2, 4), (4, 1))}" in matmul and "provenance: user" in matmul
    assert "<Tensor[Float32], (16, 32)>" in matmul and "scope: (Default/network-WithLossCell/_backbone-Net)" in matmul
    relu = _node_line(text, "relu")
    assert "{in_strategy: ((2, 4))}" in relu and "propagated from matmul" in relu
    matmul2 = _node_line(text, "matmul2")
    assert "{in_strategy: ((2, 4), (4, 1))}" in matmul2 and "propagated from relu" in matmul2


def test_execute_dumps_show_per_device_shapes_and_mindspore_groups(quickstart):
    _, dumps = quickstart
    for rank, group in ((0, "(0, 1, 2, 3)"), (4, "(4, 5, 6, 7)")):
        text = (dumps / f"rank_{rank}" / "18_execute_0000.ir").read_text()
        matmul = _node_line(text, "matmul")
        assert "(<Tensor[Float32], (8, 8)>, <Tensor[Float32], (8, 16)>)" in matmul
        lines = text.splitlines()
        start = lines.index(matmul)
        collectives = []
        for line in lines[start + 1:]:
            if not line.startswith("%c"):
                break
            collectives.append(line)
        forward_reduce = [l for l in collectives if "AllReduce(" in l and "pass: forward" in l]
        assert forward_reduce and f"rank_list: {group}" in forward_reduce[0], collectives
        assert "total collective bytes per step" in lines[-1]
