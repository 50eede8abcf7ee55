"""Recomputation: equal gradients, less temporary memory, MindSpore's options."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.compile.lowering import recompute
from graphpar.errors import CellError
from graphpar.models.mlp import DeepFFN
from tests.bigmodels.hlo_helpers import step_collectives
from tests.bigmodels.nets import data, params, run_with_memory_scheduler


def _step(mode, net, x, y):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    train(x, y)
    return train


@pytest.mark.parametrize("mode", ["stand_alone", pytest.param("data_parallel", marks=pytest.mark.slow),
                                  "semi_auto_parallel"])
def test_recomputed_layers_give_the_same_gradients(mode):
    x, y = data(64, 32, 32)
    plain = DeepFFN(32, 4)
    _step(mode, plain, x, y)
    marked = DeepFFN(32, 4, recompute=True)
    train = _step(mode, marked, x, y)
    for name, value in params(marked).items():
        np.testing.assert_allclose(value, params(plain)[name], rtol=1e-6, atol=1e-7)
    segments = recompute.segments(train.program.plan_graph([x, y]))
    assert sum(config is not None for config, _ in segments) == 4  # one checkpointed run per block


_MEMORY_SCRIPT = """
import json, numpy as np, graphpar as ms
from graphpar import nn
from graphpar.models.mlp import DeepFFN
from tests.bigmodels.nets import data
out = {}
for mode in ("stand_alone", "data_parallel"):
    for marked in (False, True):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode)
        net = DeepFFN(128, 8, recompute=marked)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
        x, y = data(4096, 128, 128)
        compiled = train.program.lower_step([x, y]).compile()
        out[f"{mode}/{marked}"] = compiled.memory_analysis().temp_size_in_bytes
print(json.dumps(out))
"""


@pytest.mark.slow
def test_recomputing_every_layer_of_8_cuts_temp_memory_by_30_percent():
    """Compiled in a fresh process with XLA's memory-minimizing CPU scheduler (see compile.recompute)."""
    temp = run_with_memory_scheduler(_MEMORY_SCRIPT)
    for mode in ("stand_alone", "data_parallel"):
        assert temp[f"{mode}/True"] <= 0.7 * temp[f"{mode}/False"], temp


@pytest.mark.parametrize("mode, batch", [("stand_alone", 1024), ("data_parallel", 4096)])  # 1024 rows a device
def test_recompute_lowers_temp_memory_with_xla_default_cpu_flags(mode, batch, monkeypatch):
    """With XLA's default CPU flags, graphpar compiles a program that recomputes with XLA:CPU's memory-optimized
    scheduler (a per-compilation option; the concurrency-optimized default runs recomputations early and keeps them
    alive); a program without recomputation keeps XLA's default."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # no scheduler flag
    temp = {}
    for marked in (False, True):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode)
        net = DeepFFN(128, 8, recompute=marked)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
        lowered = train.program.lowered(list(data(batch, 128, 128)))
        memory_scheduler = ((recompute.SCHEDULER_OPTION, recompute.MEMORY_SCHEDULER),)
        assert lowered.compiler_options == (memory_scheduler if marked else ())
        temp[marked] = lowered.compile().memory_analysis().temp_size_in_bytes
    assert temp[True] <= 0.7 * temp[False], temp


class MatMulNet(nn.Cell):
    """A model-parallel layer (a split contraction: an all-reduce in forward) inside a recomputed block."""

    def __init__(self, **options):
        super().__init__()
        rng = np.random.default_rng(0)
        self.block = Block(rng)
        self.block.recompute(**options)

    def construct(self, x):
        return self.block(x)


class Block(nn.Cell):
    def __init__(self, rng):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(rng.normal(0, 0.2, (32, 32)).astype(np.float32)), "w")
        self.w2 = ms.Parameter(ms.Tensor(rng.normal(0, 0.2, (32, 32)).astype(np.float32)), "w2")
        self.mm = ops.MatMul().shard(((1, 8), (8, 1)))
        self.act = ops.Tanh()
        self.mm2 = ops.MatMul().shard(((8, 1), (1, 1)))

    def construct(self, x):
        return self.mm2(self.act(self.mm(x, self.w)), self.w2)


@pytest.mark.slow
def test_mp_comm_recompute_false_saves_communication_outputs():
    x, y = data(16, 32, 32)
    counts, values = {}, {}
    for option in (True, False):
        net = MatMulNet(mp_comm_recompute=option)
        train = _step("semi_auto_parallel", net, x, y)
        hlo = train.program.lower_step([x, y]).compile().as_text()
        counts[option] = sum(c.nbytes for c in step_collectives(hlo) if c.kind == "AllReduce")
        values[option] = params(net)
    # recomputing the block re-runs its forward all-reduce in the backward pass unless its output was saved
    # (counted in bytes: XLA may combine the recomputed all-reduce with a gradient all-reduce)
    assert counts[True] > counts[False]
    for name in values[True]:
        np.testing.assert_allclose(values[False][name], values[True][name], rtol=1e-6)


def test_primitive_recompute_and_refused_options():
    x, y = data(64, 32, 32)
    plain = DeepFFN(32, 2)
    _step("stand_alone", plain, x, y)
    marked = DeepFFN(32, 2)
    for block in marked.blocks:
        block.act.gelu.recompute()
    train = _step("stand_alone", marked, x, y)
    for name, value in params(marked).items():
        np.testing.assert_allclose(value, params(plain)[name], rtol=1e-6, atol=1e-7)
    runs = [(config, [n.kind for n in nodes]) for config, nodes in recompute.segments(train.program.plan_graph([x, y]))
            if config is not None]
    assert runs == [(recompute.PRIMITIVE, ["GeLU"])] * 2
    with pytest.raises(CellError, match="parallel_optimizer_comm_recompute"):
        nn.Dense(4, 4).recompute(parallel_optimizer_comm_recompute=True)
    with pytest.raises(CellError, match="unknown option"):
        nn.Dense(4, 4).recompute(mp_comm=True)
    with pytest.raises(TypeError, match="mode"):
        ops.ReLU().recompute("yes")
