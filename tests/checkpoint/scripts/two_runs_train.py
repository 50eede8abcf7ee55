"""One run of the quickstart network (20 steps, 2 epochs of 10, a checkpoint every 5 steps) for the run-identity
test (not a test itself).

Usage: two_runs_train.py OUT_DIR CKPT_DIR LR KILL_STEP
  Prints ``JOB <GRAPHPAR_JOB_ID>`` and ``START STEP <n>`` (where training begins: > 0 after a rollback). On the
  first attempt (no OUT_DIR/killed marker yet) the last process SIGKILLs itself at the start of step KILL_STEP
  (0: never). At the end process 0 writes OUT_DIR/final.npz (the parameters).
"""

import os
import signal
import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.communication import get_group_size, get_rank, init
from graphpar.models.megatron import QuickstartNet
from graphpar.train import Callback, CheckpointConfig, Model, ModelCheckpoint


class Rows:
    def __init__(self, n):
        rng = np.random.default_rng(1)
        self.x = rng.normal(size=(n, 32)).astype(np.float32)
        self.y = rng.normal(size=(n, 16)).astype(np.float32)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


class Watch(Callback):
    def __init__(self, kill_step, marker):
        self.kill_step, self.marker, self.first = kill_step, marker, True

    def step_begin(self, run_context):
        step = run_context.original_args().cur_step_num
        if self.first:
            print(f"START STEP {step}", flush=True)
            self.first = False
        if self.kill_step and step + 1 == self.kill_step:
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    out, ckpt, lr, kill_step = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    print(f"JOB {os.environ.get('GRAPHPAR_JOB_ID')}", flush=True)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL)
    ds.config.set_seed(5)
    world = get_group_size()
    data = ds.GeneratorDataset(Rows(world * 2 * 10), ["x", "y"], shuffle=True, num_shards=world,
                               shard_id=get_rank()).batch(2, drop_remainder=True)
    rng = np.random.default_rng(0)
    net = QuickstartNet(weight_init=rng.normal(size=(32, 16)).astype(np.float32) * 0.1,
                        weight2_init=rng.normal(size=(16, 16)).astype(np.float32) * 0.1)
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), lr, 0.9))
    marker = os.path.join(out, "killed")
    last_process = ms.communication.get_process_index() == ms.communication.get_process_count() - 1
    watch = Watch(kill_step if last_process and not os.path.exists(marker) else 0, marker)
    model.train(2, data, callbacks=[watch, ModelCheckpoint("net", ckpt, CheckpointConfig(save_checkpoint_steps=5))])
    if ms.communication.get_process_index() == 0:
        np.savez(os.path.join(out, "final.npz"), **{p.name: p.asnumpy() for p in net.get_parameters()})
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
