"""A child for launcher tests that needs no JAX. Behaviour by argv[1]:
fail-1: process 1 prints 'boom' and exits 3 (others sleep, recording the signal that stops them); restart: fails on the first attempt, succeeds after;
sleep: records its pid and sleeps, writing 'got SIGINT' on SIGINT; ok: prints its placement and exits 0;
early-0: process 1 exits 0 at once while process 0 sleeps (recording the signal that stops it); uneven: process 1
exits 0 at once, process 0 two seconds later."""

import os
import signal
import sys
import time

mode, out = sys.argv[1], sys.argv[2]
pid = int(os.environ.get("GRAPHPAR_PROCESS_ID", os.environ.get("MS_NODE_ID", "0")))
restart = int(os.environ["GRAPHPAR_RESTART_COUNT"])
print(f"process {pid} attempt {restart} devices {os.environ.get('GRAPHPAR_LOCAL_DEVICES')}", flush=True)
if mode == "ok":
    sys.exit(0)


def record_signal_and_exit(signum, frame):
    with open(os.path.join(out, f"signal_{pid}"), "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(0)


if mode == "fail-1":  # process 1 fails only once process 0 can record the SIGTERM that stops it
    ready = os.path.join(out, "ready_0")
    if pid == 1:
        deadline = time.monotonic() + 30
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("boom", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, record_signal_and_exit)
    open(ready, "w").close()
    time.sleep(60)
if mode == "early-0":
    if pid == 1:
        print("done early", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, record_signal_and_exit)
    time.sleep(60)
if mode == "uneven":
    time.sleep(2 if pid == 0 else 0)
    sys.exit(0)
if mode == "restart":
    sys.exit(5 if restart == 0 and pid == 0 else 0)
if mode == "sleep":
    signal.signal(signal.SIGINT, record_signal_and_exit)
    with open(os.path.join(out, f"pid_{pid}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)
