"""Pipeline parallel across processes (jax.distributed on 127.0.0.1, graphpar launch): a GPT with 4 stages x tensor
parallel 2 and its output projection tied to the embedding, on 2 processes x 4 devices and 4 processes x 2
devices, with 2 stages on 4 processes of one device (a stage over two processes), and with 2 x 2 virtual
stages (zero_bubble_v, interleaved 1F1B) on 2 processes of two devices. Every process runs only its own stages'
programs; activations, their gradients and the tied weight's gradients cross processes as small ppermute/psum
programs (compile/pipeline/transfer.py). Losses equal the same model in one process without pipeline, and the
checkpoint the job saves loads into one device."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
from graphpar.checkpoint import load_checkpoint, load_param_into_net
from graphpar.checkpoint.store import read_manifest

from tests.communication.test_multiprocess import launch

from .gpt_stages import STAGES, data, model_batch, staged_gpt, train_cell
SCRIPT = Path(__file__).resolve().parent / "scripts" / "gpt_pipeline.py"


@functools.cache
def _unpipelined():
    """The same GPT on one device, no pipeline (the PipelineCell's sum over micro-batches): its losses of the 5
    steps on the fixed batch and of a 6th on ``model_batch``, and its train cell (its program compiled, for the
    checkpoint loads)."""
    ms.reset_auto_parallel_context()
    train = train_cell(staged_gpt())
    x, y = data()
    losses = [float(train(x, y)) for _ in range(5)]
    return losses + [float(train(*model_batch()))], train


def _job(tmp_path, processes: int, devices: int, stages: int = STAGES, scheduler: str | None = None) -> list[dict]:
    args = [SCRIPT, str(tmp_path), str(stages)] + ([scheduler] if scheduler else [])
    result = launch(["--nproc", str(processes), "--devices-per-proc", str(devices), *args],
                    tmp_path, timeout=300, DEVICE_TARGET="CPU")
    logs = "\n".join(p.read_text()[-3000:] for p in sorted((tmp_path / "logs").glob("*.log")))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + logs
    return [json.loads((tmp_path / f"losses_{i}.json").read_text()) for i in range(processes)]


def _check(runs: list[dict], processes: int, owned: list[list[int]], stages: int = STAGES,
           transfers: int | None = None) -> None:
    want, _ = _unpipelined()
    for rank, run in enumerate(runs):
        assert run["processes"] == processes
        assert run["owned"] == owned[rank]
        # every process reports every step's loss (the last stage's process broadcasts it); the 6th is the one
        # LossMonitor printed under Model.train
        np.testing.assert_allclose(run["losses"], want, rtol=1e-5, err_msg=f"process {rank}")
        assert run["monitor"].startswith("epoch: 1 step: 1, loss is")
        assert run["transfers"] == (transfers or 2 * (stages - 1) * 4) and run["shared_sums"] == 1


def _loads_into_one_device(tmp_path, runs: list[dict], stages: int = STAGES, last_block_stage: int | None = None
                           ) -> None:
    """The checkpoint saved after step 5 holds the tied weight once and loads into the one-device, unpipelined
    train cell (which has trained a 6th step since): its parameters and momentum are step 5's again, and the 6th
    step gives the job's 6th loss again."""
    path = str(tmp_path / "gpt_pipe.ckpt")
    manifest = read_manifest(path)
    network = [(e["name"], e.get("pipeline_stage")) for e in manifest["entries"] if e["group"] == "network"]
    assert [stage for name, stage in network if name == "embedding_table"] == [0]  # the tied weight, once
    assert dict(network)["blocks.3.output.projection.weight"] == (stages - 1 if last_block_stage is None
                                                                   else last_block_stage)
    _, train = _unpipelined()
    assert load_param_into_net(train, load_checkpoint(path)) == ([], [])
    np.testing.assert_allclose(float(train(*model_batch())), runs[0]["losses"][5], rtol=1e-5)


@pytest.mark.dist
def test_gpt_four_stages_tp2_on_two_processes_of_four_devices(tmp_path):
    runs = _job(tmp_path, 2, 4)
    _check(runs, 2, [[0, 1], [2, 3]])
    _loads_into_one_device(tmp_path, runs)


@pytest.mark.dist
def test_gpt_four_stages_tp2_on_four_processes_of_two_devices(tmp_path):
    runs = _job(tmp_path, 4, 2)
    _check(runs, 4, [[0], [1], [2], [3]])
    _loads_into_one_device(tmp_path, runs)


@pytest.mark.dist
def test_gpt_two_stages_tp2_on_four_processes_of_one_device(tmp_path):
    """One process per device (msrun's usual layout): each stage's two ranks are two processes, which both run the
    stage's programs (its tensor-parallel collectives cross processes too)."""
    runs = _job(tmp_path, 4, 1, stages=2)
    _check(runs, 4, [[0], [0], [1], [1]], stages=2)
    _loads_into_one_device(tmp_path, runs, stages=2)


@pytest.mark.dist
def test_gpt_zero_bubble_v_two_stages_tp2_on_two_processes_of_two_devices(tmp_path):
    """zero_bubble_v (virtual stages, split backward) across processes: 2 stages x 2 segments in a V, so process 0
    runs chunks 0 and 3 (the embedding and the tied head: the tied weight's two copies are summed on its own
    devices) and process 1 chunks 1 and 2 (their activations stay on its devices). Transfers cross processes at
    chunk boundaries 0|1 and 2|3 only: 2 boundaries x 2 directions x 4 micro-batches."""
    runs = _job(tmp_path, 2, 2, stages=2, scheduler="zero_bubble_v")
    _check(runs, 2, [[0, 3], [1, 2]], stages=2, transfers=2 * 2 * 4)
    _loads_into_one_device(tmp_path, runs, stages=2, last_block_stage=0)


@pytest.mark.dist
def test_gpt_interleaved_1f1b_two_stages_tp2_on_two_processes_of_two_devices(tmp_path):
    """Interleaved 1F1B across processes: process 0 runs chunks 0 and 2, process 1 chunks 1 and 3, so every chunk
    boundary crosses processes (3 x 2 directions x 4 micro-batches) and the tied weight's copies (chunks 0 and 3)
    are summed across them."""
    runs = _job(tmp_path, 2, 2, stages=2, scheduler="1f1b")
    _check(runs, 2, [[0, 2], [1, 3]], stages=2, transfers=3 * 2 * 4)
    _loads_into_one_device(tmp_path, runs, stages=2)
