"""Train a network pipelined and unpipelined on the same batches; shared by the pipeline tests."""

import numpy as np

import graphpar as ms
from graphpar import nn

from .models import GPT, TokenLoss, mlp4


def mlp_data(batch=32, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, 16)).astype(np.float32), rng.normal(size=(batch, 8)).astype(np.float32)


def gpt_data(batch=16, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 32, size=(batch, 8)).astype(np.int32),
            rng.integers(0, 32, size=(batch, 8)).astype(np.int32))


def build(model, stages, **kw):
    """(network, loss, optimizer factory) of ``model`` ("mlp" or "gpt") staged for ``stages``."""
    if model == "mlp":
        net = mlp4(stages=stages, **kw)
        return net, nn.MSELoss(), lambda params: nn.Momentum(params, 0.05, 0.9)
    # momentum, not Adam: the key projection's bias has an exactly-zero gradient (softmax ignores a constant per
    # query), whose rounding noise Adam would scale up to full-size steps differently in any two summation orders
    net = GPT(stages=stages, **kw)
    return net, TokenLoss(32), lambda params: nn.Momentum(params, 0.1, 0.9)


def train_pipelined(model, stages, micro, scheduler, x, y, steps, strategies=False, **ctx):
    """Losses, network and train cell of ``steps`` pipelined steps on 8 devices (SEMI_AUTO_PARALLEL)."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages,
                                 pipeline_config={"pipeline_scheduler": scheduler, "pipeline_interleave": False},
                                 **ctx)
    net, loss, opt = build(model, stages, **({"strategies": True} if strategies else {}))
    train = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, loss), micro), opt(net.trainable_params()))
    losses = [float(train(x, y)) for _ in range(steps)]
    return losses, net, train


def train_unpipelined(model, stages, micro, x, y, steps, whole_batch=False):
    """The same training on one device (STAND_ALONE). By default the ``PipelineCell`` runs as written (the sum
    of the micro-batches' losses, MindSpore's semantics); ``whole_batch``: the plain network on the whole batch
    with sensitivity ``micro`` (the same gradient for a mean loss), its losses scaled by ``micro``."""
    ms.reset_auto_parallel_context()
    net, loss, opt = build(model, stages)
    if whole_batch:
        train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt(net.trainable_params()), sens=float(micro))
        return [float(train(x, y)) * micro for _ in range(steps)], net
    train = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, loss), micro), opt(net.trainable_params()))
    return [float(train(x, y)) for _ in range(steps)], net


def params(net):
    return {p.name: p.asnumpy() for p in net.trainable_params()}
