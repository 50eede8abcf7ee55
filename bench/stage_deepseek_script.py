"""A MindSpore-style training script of the DeepSeek-V3-like MoE (:mod:`bench.stage_moe`) for ``graphpar plan``:
``PYTHONPATH=$PWD graphpar plan bench/stage_deepseek_script.py --devices 1024 --platform gpu`` plans it for 1,024
GPUs of 80 GB (the stage search with expert parallel; global batch 1,024: one sequence of 4,096 per device). Built
under ``no_init_parameters()``: nothing is drawn, so it plans on a laptop; run for real it would need the devices."""

import numpy as np

import graphpar as ms
from bench.stage_moe import DEEPSEEK_V3, loss_network
from graphpar import nn
from graphpar.nn.utils import no_init_parameters

ms.set_context(mode=ms.GRAPH_MODE, max_device_memory="80GB")
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, auto_pipeline=True)
with no_init_parameters():
    net = loss_network(**DEEPSEEK_V3)
train = nn.TrainOneStepCell(net, nn.Adam(net.trainable_params(), 1e-4))
train(np.zeros((1, DEEPSEEK_V3["seq"]), np.int32), np.zeros((DEEPSEEK_V3["seq"],), np.int32))
