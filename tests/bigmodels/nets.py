"""Networks the bigmodels tests share: a wide MLP (parameters above the parallel optimizer's threshold) and a
deep FFN stack (for recomputation)."""

import numpy as np

import graphpar as ms
from graphpar import nn


def _init(rng, shape, fan_in):
    return ms.Tensor(rng.normal(0, 1 / np.sqrt(fan_in), shape).astype(np.float32))


class WideMLP(nn.Cell):
    """64 -> 256 -> 64: weights of 64 KB, biases of 1 KB and 256 B."""

    def __init__(self, d_in=64, hidden=256, d_out=64, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc1 = nn.Dense(d_in, hidden, weight_init=_init(rng, (hidden, d_in), d_in), bias_init="zeros",
                            activation="relu")
        self.fc2 = nn.Dense(hidden, d_out, weight_init=_init(rng, (d_out, hidden), hidden), bias_init="zeros")

    def construct(self, x):
        return self.fc2(self.fc1(x))


class FFN(nn.Cell):
    """d -> 4d -> d with a residual connection (a transformer block's MLP)."""

    def __init__(self, d, seed):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc = nn.Dense(d, 4 * d, weight_init=_init(rng, (4 * d, d), d), bias_init="zeros")
        self.act = nn.GELU()
        self.proj = nn.Dense(4 * d, d, weight_init=_init(rng, (d, 4 * d), 4 * d), bias_init="zeros")

    def construct(self, x):
        return self.proj(self.act(self.fc(x))) + x


class DeepFFN(nn.Cell):
    """``layers`` FFN blocks; ``recompute`` marks every block with ``Cell.recompute(**options)``."""

    def __init__(self, d=32, layers=8, recompute=False, **options):
        super().__init__()
        self.blocks = nn.CellList([FFN(d, i) for i in range(layers)])
        if recompute:
            for block in self.blocks:
                block.recompute(**options)

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def data(n, d_in, d_out, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d_in)).astype(np.float32), rng.normal(size=(n, d_out)).astype(np.float32)


def params(net):
    return {p.name: p.asnumpy() for p in net.get_parameters()}


class MegatronMLP(nn.Cell):
    """Megatron's MLP with MindSpore strategies: column-split then row-split matmul, ``dp`` x ``mp`` devices."""

    def __init__(self, d=16, hidden=64, dp=2, mp=4, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.w1 = ms.Parameter(_init(rng, (d, hidden), d), "w1")
        self.w2 = ms.Parameter(_init(rng, (hidden, d), hidden), "w2")
        self.matmul1 = ms.ops.MatMul().shard(((dp, 1), (1, mp)))
        self.relu = ms.ops.ReLU().shard(((dp, mp),))
        self.matmul2 = ms.ops.MatMul().shard(((dp, mp), (mp, 1)))

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul1(x, self.w1)), self.w2)


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
