"""A GPT (graphpar.models.gpt: tied embedding, tensor-parallel shard hints mp=2) trained with 4 pipeline stages,
one process or several (not a test itself; tests/pipeline/test_pipeline_processes.py launches it).

Calls init() (graphpar launch, msrun, Dynamic Cluster variables, mpirun or alone), trains 5 steps on a fixed batch,
saves a checkpoint into OUT, trains one more step with ``Model.train`` and ``LossMonitor`` (an unsharded dataset of
4 sequences: tests.pipeline.gpt_stages.model_batch), and writes every step's loss as this process saw it to
OUT/losses_<process>.json (with the mean wall and CPU seconds of steps 2-5 in this process). Usage:
gpt_pipeline.py OUT [STAGES [SCHEDULER]] (SCHEDULER: "1f1b" or "zero_bubble_v" with pipeline_interleave, 2
segments per stage: tests.pipeline.gpt_stages.staged_gpt)
"""

import contextlib
import io
import json
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root: the tests' own helpers

import graphpar as ms  # noqa: E402
from graphpar.checkpoint import save_checkpoint  # noqa: E402
from graphpar.communication import init  # noqa: E402
from graphpar.train import LossMonitor, Model  # noqa: E402

from tests.pipeline.gpt_stages import STAGES, data, staged_gpt, train_cell  # noqa: E402
from tests.train.helpers import array_dataset  # noqa: E402

out = Path(sys.argv[1])
stages = int(sys.argv[2]) if len(sys.argv) > 2 else STAGES
scheduler = sys.argv[3] if len(sys.argv) > 3 else None
init()
ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages)
if scheduler is not None:
    ms.set_auto_parallel_context(pipeline_config={"pipeline_interleave": True, "pipeline_scheduler": scheduler})
train = train_cell(staged_gpt(stages, scheduler))
x, y = data()
losses = [float(train(x, y))]  # compiles
started, cpu = time.perf_counter(), time.process_time()
losses += [float(train(x, y)) for _ in range(4)]
seconds = {"step_wall": (time.perf_counter() - started) / 4, "step_cpu": (time.process_time() - cpu) / 4}
save_checkpoint(train, str(out / "gpt_pipe.ckpt"))
printed = io.StringIO()
with contextlib.redirect_stdout(printed):  # what LossMonitor prints on this process
    Model(train).train(1, array_dataset(x[:4], y[:4], batch_size=4), callbacks=[LossMonitor()])
losses.append(float(printed.getvalue().strip().rsplit(" ", 1)[1]))
stats = train.program.stats
(out / f"losses_{jax.process_index()}.json").write_text(json.dumps({
    "losses": losses, "monitor": printed.getvalue(), **seconds, "processes": jax.process_count(),
    "devices": jax.local_device_count(),
    "owned": [st.sg.stage for st in next(iter(train.program._built.values())).stages if st.owned],
    "transfers": stats.transfers_last_step, "shared_sums": stats.shared_sums_last_step}))
print("DONE process", jax.process_index(), flush=True)
