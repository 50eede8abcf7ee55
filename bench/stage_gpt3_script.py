"""A MindSpore-style training script of GPT-3 175B (:mod:`bench.stage_gpt`) for ``graphpar plan``:
``PYTHONPATH=$PWD graphpar plan bench/stage_gpt3_script.py --devices 1536 --platform gpu`` plans it for 1,536
GPUs of 80 GB (the stage search; global batch 1,536: one sequence of 2,048 per device, as MindSpore's
data-parallel input of a device). Built under ``no_init_parameters()``: nothing is drawn, so it plans on a laptop;
run for real it would need the devices."""

import numpy as np

import graphpar as ms
from bench.stage_gpt import GPT3_175B, loss_network
from graphpar import nn
from graphpar.nn.utils import no_init_parameters

ms.set_context(mode=ms.GRAPH_MODE, max_device_memory="80GB")
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, auto_pipeline=True)
with no_init_parameters():
    net = loss_network(**GPT3_175B)
train = nn.TrainOneStepCell(net, nn.Adam(net.trainable_params(), 1e-4))
train(np.zeros((1, GPT3_175B["seq"]), np.int32), np.zeros((GPT3_175B["seq"],), np.int32))
