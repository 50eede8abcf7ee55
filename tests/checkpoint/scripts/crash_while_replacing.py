"""Save model.ckpt, then SIGKILL while replacing it, between the two renames (not a test itself).

Usage: crash_while_replacing.py DIR
"""

import os
import signal
import sys

import numpy as np

import graphpar as ms
from graphpar.checkpoint import replacing, save_checkpoint

directory = sys.argv[1]
name = os.path.join(directory, "model.ckpt")
save_checkpoint([ms.Parameter(ms.Tensor(np.full((8, 8), 1.0, np.float32)), name="p0")], name)
real_rename = os.rename


def rename_then_die(src, dst):
    if dst == name:  # the second rename: the old checkpoint is already aside
        os.kill(os.getpid(), signal.SIGKILL)
    real_rename(src, dst)


replacing.os.rename = rename_then_die
save_checkpoint([ms.Parameter(ms.Tensor(np.full((8, 8), 2.0, np.float32)), name="p0")], name)
