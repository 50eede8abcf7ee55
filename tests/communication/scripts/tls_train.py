"""A small data-parallel training job with TLS on the control plane (used by test_tls_jobs.py, not a test).

Usage: tls_train.py CONFIG_OF_PROCESS_0 CONFIG_OF_THE_OTHERS — each process calls set_ps_context(enable_ssl=True,
config_file_path=its config, passwords) before init(), as MindSpore scripts do; then 4 steps of training.
"""

import os
import sys

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.communication import init
from graphpar.train import LossMonitor, Model

PASSWORD = "graphpar-test-pw"

if __name__ == "__main__":
    config = sys.argv[1] if os.environ.get("GRAPHPAR_PROCESS_ID") == "0" else sys.argv[2]
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_ps_context(enable_ssl=True, config_file_path=config, client_password=PASSWORD, server_password=PASSWORD)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 8)).astype(np.float32), rng.normal(size=(32, 2)).astype(np.float32)
    data = ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(8)
    net = nn.Dense(8, 2)
    Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(1, data, callbacks=[LossMonitor()])
    print("TRAINED", flush=True)
