"""A GPT (graphpar.models.gpt: tied embedding, tensor-parallel shard hints mp=2) trained with 4 pipeline stages,
one process or several (not a test itself; tests/pipeline/test_pipeline_processes.py launches it).

Calls init() (graphpar launch, msrun, Dynamic Cluster variables, mpirun or alone), trains 5 steps on a fixed batch,
saves a checkpoint into OUT, trains one more step, and writes every step's loss as this process saw it to
OUT/losses_<process>.json. Usage: gpt_pipeline.py OUT
"""

import json
import sys
from pathlib import Path

import jax

import graphpar as ms
from graphpar import nn
from graphpar.checkpoint import save_checkpoint
from graphpar.communication import init

from tests.pipeline.gpt_stages import STAGES, data, staged_gpt, train_cell

out = Path(sys.argv[1])
init()
ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=STAGES)
train = train_cell(staged_gpt())
x, y = data()
losses = [float(train(x, y)) for _ in range(5)]
save_checkpoint(train, str(out / "gpt_pipe.ckpt"))
losses.append(float(train(x, y)))
stats = train.program.stats
(out / f"losses_{jax.process_index()}.json").write_text(json.dumps({
    "losses": losses, "processes": jax.process_count(), "devices": jax.local_device_count(),
    "owned": [st.sg.stage for st in next(iter(train.program._built.values())).stages if st.owned],
    "transfers": stats.transfers_last_step, "shared_sums": stats.shared_sums_last_step}))
print("DONE process", jax.process_index(), flush=True)
