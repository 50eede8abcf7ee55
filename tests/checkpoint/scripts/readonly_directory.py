"""Train with a ModelCheckpoint whose directory becomes read-only after step 3 (not a test itself).

Usage: readonly_directory.py DIR sync|async. Run it without the right to override file permissions (as root:
under ``setpriv`` without CAP_DAC_OVERRIDE), else the directory stays writable.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from graphpar.train import Callback, CheckpointConfig, ModelCheckpoint  # noqa: E402
from tests.checkpoint.helpers import dropout_mlp, momentum_model, shuffled_dataset  # noqa: E402

directory, mode = sys.argv[1], sys.argv[2]


class ReadOnlyAfterStep3(Callback):
    def step_end(self, run_context):
        if run_context.original_args().cur_step_num == 3:
            os.chmod(directory, 0o555)


ckpt = ModelCheckpoint("net", directory, CheckpointConfig(save_checkpoint_steps=2, async_save=mode == "async"))
momentum_model(dropout_mlp()).train(1, shuffled_dataset(), callbacks=[ReadOnlyAfterStep3(), ckpt])
