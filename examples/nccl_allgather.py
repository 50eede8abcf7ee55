# nccl_allgather.py: the GPU training example's NCCL check, ported to graphpar.
#
#   graphpar launch --nproc 4 --devices-per-proc 2 python examples/nccl_allgather.py      4 processes x 2 devices
#   XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/nccl_allgather.py  1 process x 8 devices
#   mpirun -n 4 python examples/nccl_allgather.py                                           OpenMPI, 1 device each
#
# It runs on the platform it finds: GPU when a JAX GPU plugin is installed (then NCCL, as in the seed), else CPU
# (gloo); DEVICE_TARGET=CPU/GPU chooses. The choice is made before init(), which must run before JAX starts. MindSpore runs one process per device and each
# passes [[rank]]; a graphpar process drives several devices, so it passes one row per device it drives (its local
# ranks). Expected output, one row per rank in rank order: [[0.] [1.] ... ].
import os
from importlib.metadata import entry_points

import jax
import numpy as np
import graphpar.ops as ops
import graphpar.nn as nn
from graphpar import set_context, GRAPH_MODE, Tensor
from graphpar.communication import init, get_rank


class Net(nn.Cell):
    def __init__(self):
        super(Net, self).__init__()
        self.allgather = ops.AllGather()

    def construct(self, x):
        return self.allgather(x)


def found_target() -> str:
    """GPU when JAX has a GPU plugin installed (and JAX_PLATFORMS allows it), else CPU; without starting JAX."""
    allowed = os.environ.get("JAX_PLATFORMS", "")
    if allowed and not any(p in allowed for p in ("cuda", "gpu", "rocm")):
        return "CPU"
    plugins = {ep.name for ep in entry_points(group="jax_plugins")}
    return "GPU" if any("cuda" in p or "rocm" in p for p in plugins) else "CPU"


if __name__ == "__main__":
    device_target = os.environ.get("DEVICE_TARGET") or found_target()
    set_context(mode=GRAPH_MODE, device_target=device_target)
    init("nccl" if device_target == "GPU" else None)
    value = get_rank() + np.arange(jax.local_device_count())  # the ranks this process drives
    input_x = Tensor(value.reshape(-1, 1).astype(np.float32))
    net = Net()
    output = net(input_x)
    print(output)
