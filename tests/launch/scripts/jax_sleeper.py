"""Joins the job, records its pid per process and sleeps: the launcher test SIGKILLs one of these."""

import os
import sys
import time

from graphpar.communication import get_process_index, init

init()
with open(os.path.join(sys.argv[1], f"pid_{get_process_index()}"), "w") as f:
    f.write(str(os.getpid()))
print("ready", flush=True)
time.sleep(120)
