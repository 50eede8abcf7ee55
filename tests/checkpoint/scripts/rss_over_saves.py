"""RSS and Python objects over N asynchronous saves of one small network (not a test itself).

Usage: rss_over_saves.py DIR N [--plain-orbax]. Prints one JSON line: growth per save after a warm-up of 30 saves,
in KiB of RSS and in garbage-collected Python objects. ``--plain-orbax`` saves with orbax's AsyncCheckpointer
directly (the upstream reproducer of docs/checkpoints.md §4), without graphpar.
"""

import gc
import json
import os
import sys

import jax
import numpy as np

WARM_UP = 30


def rss_kib() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))


def main() -> None:
    directory, saves, plain = sys.argv[1], int(sys.argv[2]), "--plain-orbax" in sys.argv
    arrays = {f"p{i}": jax.numpy.full((16, 16), float(i)) for i in range(4)}
    if plain:
        import orbax.checkpoint as ocp

        checkpointer = ocp.AsyncCheckpointer(ocp.PyTreeCheckpointHandler())

        def save() -> None:
            checkpointer.save(os.path.join(directory, "x"), args=ocp.args.PyTreeSave(arrays), force=True)
            checkpointer.wait_until_finished()
    else:
        import graphpar as ms
        from graphpar.checkpoint import save_checkpoint, wait_for_saves

        params = [ms.Parameter(ms.Tensor(v), name=k) for k, v in arrays.items()]

        def save() -> None:
            save_checkpoint(params, os.path.join(directory, "x.ckpt"), async_save=True)
            wait_for_saves()
    for _ in range(WARM_UP):
        save()
    gc.collect()
    rss, objects = rss_kib(), len(gc.get_objects())
    for _ in range(saves):
        save()
    gc.collect()
    print(json.dumps({"kib_per_save": (rss_kib() - rss) / saves,
                      "objects_per_save": (len(gc.get_objects()) - objects) / saves}))


if __name__ == "__main__":
    main()
