"""Seed 000's Dynamic Cluster job with TLS, made small (used by test_scheduler_tls.py, not a test).

Usage: tls_dc_train.py CONFIG — run by the scheduler and every worker alike, as MindSpore's run_gpu_cluster.sh
does (MS_ROLE says which): set_ps_context(enable_ssl=True, config_file_path=CONFIG, passwords) before init(); the
scheduler's init() serves the workers and exits; each worker trains 4 data-parallel steps.
"""

import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.communication import init
from graphpar.train import LossMonitor, Model

PASSWORD = "graphpar-test-pw"

if __name__ == "__main__":
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_ps_context(config_file_path=sys.argv[1], enable_ssl=True, client_password=PASSWORD,
                      server_password=PASSWORD)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 8)).astype(np.float32), rng.normal(size=(32, 2)).astype(np.float32)
    data = ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(8)
    net = nn.Dense(8, 2)
    Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(1, data, callbacks=[LossMonitor()])
    print("TRAINED", flush=True)
