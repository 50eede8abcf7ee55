"""Joins a JAX job of two processes, runs one collective, then process 1 leaves by argv[1] while process 0 goes on
to a second collective (it waits there for process 1): exit-0 (sys.exit(0)) or raise (an uncaught ValueError)."""

import sys

import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from graphpar.communication import get_process_index, init

init()
print("gathered", multihost_utils.process_allgather(jnp.ones(1)).tolist(), flush=True)
if get_process_index() == 1:
    if sys.argv[1] == "raise":
        raise ValueError("process 1 gives up")
    print("leaving early", flush=True)
    sys.exit(0)
print("waiting for process 1", flush=True)
print(multihost_utils.process_allgather(np.ones(1)).tolist(), flush=True)
