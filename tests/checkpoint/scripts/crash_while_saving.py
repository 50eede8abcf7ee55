"""Save checkpoint A, then die by SIGKILL while saving checkpoint B (not a test itself).

Usage: crash_while_saving.py DIR WHEN, WHEN one of
  before-manifest  the process dies after orbax committed B's files, before graphpar's manifest is written
  during-write     an async save of B is in flight (orbax still writing) when the process dies
"""

import os
import signal
import sys

import numpy as np

import graphpar as ms
from graphpar.checkpoint import manifest, save_checkpoint

directory, when = sys.argv[1], sys.argv[2]
big = [ms.Parameter(ms.Tensor(np.full((1024, 1024), float(i), np.float32)), name=f"p{i}") for i in range(24)]
save_checkpoint(big[:2], os.path.join(directory, "A"))
print("A saved", flush=True)
if when == "before-manifest":
    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    manifest.write = die
    save_checkpoint(big, os.path.join(directory, "B"))
else:
    save_checkpoint(big, os.path.join(directory, "B"), async_save=True)
    os.kill(os.getpid(), signal.SIGKILL)
