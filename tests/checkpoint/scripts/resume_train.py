"""Train the Dropout MLP of tests/checkpoint/helpers.py on a shuffled dataset (not a test itself).

Usage: resume_train.py OUT_DIR STOP_STEP RESUME
  STOP_STEP > 0: stop after that step (a checkpoint every 4 steps); RESUME=1: Model.train(resume=True).
  Prints ``LOSS <epoch> <step> <loss as float32 hex>`` per step and writes OUT_DIR/params_<STOP>_<RESUME>.npz.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))

import graphpar as ms  # noqa: E402
from graphpar.train import CheckpointConfig, ModelCheckpoint  # noqa: E402
from tests.checkpoint.helpers import (  # noqa: E402
    Record, StopAt, dropout_mlp, momentum_model, params, shuffled_dataset)

out, stop, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
ms.set_seed(3)
net = dropout_mlp()
record = Record()
callbacks = [ModelCheckpoint("net", os.path.join(out, "ckpt"), CheckpointConfig(save_checkpoint_steps=4)), record]
if stop:
    callbacks.append(StopAt(stop))
momentum_model(net).train(3, shuffled_dataset(), callbacks=callbacks, resume=resume)
for (epoch, step), loss in zip(record.where, record.losses):
    print(f"LOSS {epoch} {step} {np.float32(loss).tobytes().hex()}", flush=True)
np.savez(os.path.join(out, f"params_{stop}_{int(resume)}.npz"), **params(net))
