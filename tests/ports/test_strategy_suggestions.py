"""Every "e.g." a refused ``shard()`` strategy suggests is itself accepted: following the suggestion never meets the
next error (an unsplittable Conv2D height used to be fixed while its width stayed split; a divisor used to be given
for one input only).

Device counts 2, 4 and 8 come from ``device_num`` (the job trains on ranks ``0..device_num-1``), so one process
covers them; the strategies are random (hypothesis), the networks are the seeds' ops.
"""

import ast
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphpar as ms
from graphpar import nn, ops
from graphpar.common.parameter import Parameter
from graphpar.compile.runtime.forward import ForwardProgram
from graphpar.errors import StrategyError

SUGGESTION = re.compile(r"e\.g\. (\(\(.*\)\))$")


class MatMulNet(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.w = Parameter(ms.Tensor(np.ones((24, 12), np.float32)), "w")
        self.matmul = ops.MatMul().shard(strategy)

    def construct(self, x):
        return self.matmul(x, self.w)


class ConvNet(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.conv = nn.Conv2d(6, 12, 3, pad_mode="same")
        self.conv.conv2d.shard(strategy)

    def construct(self, x):
        return self.conv(x)


class BiasAddNet(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.b = Parameter(ms.Tensor(np.ones((12,), np.float32)), "b")
        self.add = ops.BiasAdd().shard(strategy)

    def construct(self, x):
        return self.add(x, self.b)


NETS = {  # network, input shape, the rank of each strategy entry
    "matmul": (MatMulNet, (16, 24), (2, 2)),
    "conv": (ConvNet, (8, 6, 10, 10), (4, 4)),
    "bias_add": (BiasAddNet, (16, 12), (2, 1)),
}


def _plan(name: str, strategy, devices: int) -> None:
    make, shape, _ = NETS[name]
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=devices, full_batch=True)
    ForwardProgram(make(strategy)).planned(np.ones(shape, np.float32))


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(NETS)))
    ranks = NETS[name][2]
    split = st.sampled_from([1, 1, 2, 3, 4, 8])
    strategy = tuple(tuple(draw(split) for _ in range(r)) for r in ranks)
    return name, strategy, draw(st.sampled_from([2, 4, 8]))


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(cases())
def test_a_refused_strategy_suggests_an_accepted_one(case):
    name, strategy, devices = case
    try:
        _plan(name, strategy, devices)
        return
    except StrategyError as err:
        message = str(err)
    found = SUGGESTION.search(message)
    assert found, message
    suggested = ast.literal_eval(found.group(1))
    _plan(name, suggested, devices)  # must not raise


@pytest.mark.parametrize("name, strategy, devices, suggested", [
    # 16 devices asked: H and W both back to 1 (a split MindSpore's Conv2D conditions would still have to allow)
    ("conv", ((2, 1, 2, 4), (1, 1, 1, 1)), 8, "((2, 1, 1, 1), (1, 1, 1, 1))"),
    ("matmul", ((3, 1), (1, 1)), 8, "((4, 1), (1, 1))"),  # the whole strategy, not one input's entry
    ("matmul", ((2, 4), (4, 1)), 4, "((2, 2), (2, 1))"),  # seed 004's strategy on 4 devices
])
def test_known_suggestions(name, strategy, devices, suggested):
    with pytest.raises(StrategyError) as info:
        _plan(name, strategy, devices)
    assert str(info.value).endswith(f"e.g. {suggested}"), str(info.value)
