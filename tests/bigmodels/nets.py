"""Networks the bigmodels tests share, built from graphpar.models: a wide MLP (parameters above the parallel
optimizer's threshold), a deep FFN stack (for recomputation), Megatron's MLP and a BatchNorm MLP."""

import numpy as np

from graphpar import Tensor, nn, ops
from graphpar.models.megatron import MegatronMLP
from graphpar.models.mlp import MLP


def wide_mlp(d_in=64, hidden=256, d_out=64, seed=0) -> MLP:
    """64 -> 256 -> 64: weights of 64 KB, biases of 1 KB and 256 B; normal 1/sqrt(fan-in) weights."""
    return MLP(d_in, hidden, d_out, seed=seed, scale=None)


def data(n, d_in, d_out, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d_in)).astype(np.float32), rng.normal(size=(n, d_out)).astype(np.float32)


def params(net):
    return {p.name: p.asnumpy() for p in net.get_parameters()}


def megatron_mlp(d=16, hidden=64, dp=2, mp=4, seed=0) -> MegatronMLP:
    """Megatron's MLP with MindSpore strategies on ``dp`` x ``mp`` devices, ReLU hinted ``((dp, mp),)``."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 1 / np.sqrt(d), (d, hidden)).astype(np.float32)
    w2 = rng.normal(0, 1 / np.sqrt(hidden), (hidden, d)).astype(np.float32)
    return MegatronMLP(w1, w2, dp, mp, activation=ops.ReLU().shard(((dp, mp),)))


class DenseBatchNorm(nn.Cell):
    """Dense without bias -> BatchNorm1d -> ReLU -> Dense (d_in -> hidden -> d_out), normal weights from
    ``default_rng(seed)``: SEMI_AUTO normalizes over the whole batch and keeps moving statistics."""

    def __init__(self, d_in=16, hidden=32, d_out=8, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc1 = nn.Dense(d_in, hidden, weight_init=Tensor(rng.normal(0, 0.25, (hidden, d_in)).astype(np.float32)),
                            has_bias=False)  # BatchNorm's beta is the bias (as convolutions before BN in ResNets)
        self.bn, self.relu = nn.BatchNorm1d(hidden), nn.ReLU()
        self.fc2 = nn.Dense(hidden, d_out, weight_init=Tensor(rng.normal(0, 0.2, (d_out, hidden)).astype(np.float32)),
                            bias_init="zeros")

    def construct(self, x):
        return self.fc2(self.relu(self.bn(self.fc1(x))))


def run_with_memory_scheduler(script: str) -> dict:
    """Run ``script`` in a fresh process with XLA's memory-minimizing CPU scheduler (the flag graphpar advises once
    for recompute and level3, see compile.recompute) and return the JSON object its last line prints."""
    import json
    import os
    import subprocess
    import sys

    from graphpar.compile.lowering import recompute

    env = dict(os.environ, PYTHONPATH=os.getcwd(),
               XLA_FLAGS=f"--xla_force_host_platform_device_count=8 {recompute.MEMORY_SCHEDULER_FLAG}")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
