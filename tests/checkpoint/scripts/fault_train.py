"""The quickstart network trained 30 steps (3 epochs of 10, shuffled, sharded over all ranks) with a checkpoint
every 5 steps; used by the recovery tests (not a test itself).

Usage: fault_train.py OUT_DIR KILL_STEP [async]
  On the first attempt (no OUT_DIR/killed marker yet) the process holding the last rank writes the marker (the step
  of the newest checkpoint committed by then) and SIGKILLs itself at the start of step KILL_STEP (0: never). A restarted job rolls back by itself to the newest
  complete checkpoint. At the end process 0 writes OUT_DIR/final.npz (the parameters); LossMonitor prints the steps.
  Without a kill step the run also saves and reloads a sliced checkpoint (integrated_save=False) and prints
  ``SLICED OK process <i>`` on each process.
"""

import os
import signal
import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.checkpoint.directory import complete_checkpoints
from graphpar.communication import get_group_size, get_rank, init
from graphpar.models.megatron import QuickstartNet
from graphpar.train import Callback, CheckpointConfig, LossMonitor, Model, ModelCheckpoint


def quickstart_net() -> QuickstartNet:
    rng = np.random.default_rng(0)
    w = rng.normal(size=(32, 16)).astype(np.float32) * 0.1
    return QuickstartNet(weight_init=w, weight2_init=rng.normal(size=(16, 16)).astype(np.float32) * 0.1)


class Rows:
    def __init__(self, n):
        rng = np.random.default_rng(1)
        self.x = rng.normal(size=(n, 32)).astype(np.float32)
        self.y = rng.normal(size=(n, 16)).astype(np.float32)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


class KillAt(Callback):
    """SIGKILL this process at the start of ``step``; the marker file says the step of the newest checkpoint
    committed by then (an asynchronous save may still be in flight)."""

    def __init__(self, step, marker, directory):
        self.step, self.marker, self.directory = step, marker, directory

    def step_begin(self, run_context):
        if run_context.original_args().cur_step_num + 1 == self.step:
            found = complete_checkpoints(self.directory, "fault")
            committed = found[-1][2]["train"]["step"] if found else 0
            print(f"KILLING process holding rank {get_rank()} at step {self.step} (newest committed checkpoint: "
                  f"step {committed})", flush=True)
            with open(self.marker, "w") as fh:
                fh.write(str(committed))
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    out, kill_step = sys.argv[1], int(sys.argv[2])
    async_save = len(sys.argv) > 3 and sys.argv[3] == "async"
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, search_mode="sharding_propagation")
    ds.config.set_seed(5)
    world = get_group_size()
    data = ds.GeneratorDataset(Rows(world * 2 * 10), ["x", "y"], shuffle=True, num_shards=world,
                               shard_id=get_rank()).batch(2, drop_remainder=True)
    net = quickstart_net()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    config = CheckpointConfig(save_checkpoint_steps=5, keep_checkpoint_max=3, async_save=async_save)
    # the seeds' recovery setup: one directory per rank; graphpar writes one checkpoint into process 0's
    callbacks = [ModelCheckpoint("fault", os.path.join(out, "ckpt_of_rank_", str(get_rank())), config),
                 LossMonitor()]
    last_process = ms.communication.get_process_index() == ms.communication.get_process_count() - 1
    marker = os.path.join(out, "killed")
    if kill_step and last_process and not os.path.exists(marker):
        callbacks.insert(0, KillAt(kill_step, marker, os.path.join(out, "ckpt_of_rank_", "0")))
    model.train(3, data, callbacks=callbacks)
    values = {p.name: p.asnumpy() for p in net.get_parameters()}
    if ms.communication.get_process_index() == 0:
        np.savez(os.path.join(out, "final.npz"), **values)
    if not kill_step:  # sliced save by both processes, merged on load
        ms.save_checkpoint(net, os.path.join(out, "sliced"), integrated_save=False)
        loaded = ms.load_checkpoint(os.path.join(out, "sliced.ckpt"))
        same = all(np.array_equal(loaded[k].asnumpy(), v) for k, v in values.items())
        print(f"SLICED {'OK' if same else 'MISMATCH'} process {ms.communication.get_process_index()}", flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
