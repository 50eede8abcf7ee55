"""A graphpar error raised deep in the compile stack reaches the user with their own frames and its one-line message,
not ~30 frames of graphpar internals (issue 27, item 17): ``errors.api_boundary`` on Cell calls and Model's entry
points trims graphpar's, JAX's and contextlib's frames."""

import traceback

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import Parameter, Tensor, nn, ops
from graphpar.errors import StrategyError
from graphpar.ir.construct_errors import OpShapeError
from graphpar.train import Model

MAX_GRAPHPAR_FRAMES = 2


class Net(nn.Cell):
    def __init__(self, strategy=None):
        super().__init__()
        self.w = Parameter(Tensor(np.ones((8, 4), np.float32)), "w")
        self.matmul = ops.MatMul()
        if strategy is not None:
            self.matmul.shard(strategy)

    def construct(self, x):
        return self.matmul(x, self.w)  # the user's line the traceback must show


class Divides(nn.Cell):
    def construct(self, x):
        return x / (1 // 0)


def _frames(info: pytest.ExceptionInfo) -> list[traceback.FrameSummary]:
    return traceback.extract_tb(info.value.__traceback__)


def _graphpar(frames: list[traceback.FrameSummary]) -> list[str]:
    return [f"{f.filename}:{f.lineno} {f.name}" for f in frames if "/graphpar/" in f.filename]


def _train(net, features):
    x, y = np.ones((16, features), np.float32), np.ones((16, 4), np.float32)
    data = ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(8)
    Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(1, data)


def _shows_the_users_construct(frames):
    assert any(f.name == "construct" and f.filename == __file__ for f in frames), frames


def test_a_shape_error_in_model_train_shows_the_users_frames():
    with pytest.raises(OpShapeError) as info:
        _train(Net(), 16)
    frames = _frames(info)
    assert len(_graphpar(frames)) <= MAX_GRAPHPAR_FRAMES, _graphpar(frames)
    _shows_the_users_construct(frames)
    assert frames[0].name == "test_a_shape_error_in_model_train_shows_the_users_frames"  # the call site
    assert "x[8, 16], y[8, 4]" in str(info.value)


def test_a_shape_error_in_a_direct_cell_call_shows_the_users_frames():
    with pytest.raises(OpShapeError) as info:
        Net()(Tensor(np.ones((8, 16), np.float32)))
    frames = _frames(info)
    assert len(_graphpar(frames)) <= MAX_GRAPHPAR_FRAMES, _graphpar(frames)
    _shows_the_users_construct(frames)


def test_a_strategy_error_while_planning_shows_few_graphpar_frames():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    try:
        with pytest.raises(StrategyError) as info:
            _train(Net(((2, 1, 1), (1, 1))), 8)
    finally:
        ms.reset_auto_parallel_context()
    assert len(_graphpar(_frames(info))) <= MAX_GRAPHPAR_FRAMES, _graphpar(_frames(info))


def test_an_error_that_is_not_graphpars_keeps_every_frame():
    with pytest.raises(ZeroDivisionError) as info:
        Divides()(Tensor(np.ones((2,), np.float32)))
    assert len(_graphpar(_frames(info))) > MAX_GRAPHPAR_FRAMES  # a bug's traceback is not trimmed
