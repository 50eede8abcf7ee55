"""The channels-last pass (``graphpar.compile.lowering.channels_last``): an NCHW network written as MindSpore's, run
with its convolutions and the ops between them in NHWC, computes what it computes as written — the same losses,
parameters, dumps and checkpoints — in every parallel mode, with transposes only where a value leaves the region.

The pass is forced on with ``set_context(format_transform="channels_last")`` (its default, "auto", runs it on GPUs
only) and compared with ``format_transform="off"``."""

import re

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.compile.lowering import channels_last
from graphpar.errors import ConfigError


class Block(nn.Cell):
    """A residual block as ResNet's: conv-BN-ReLU-conv-BN, the shortcut added, ReLU."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, pad_mode="same")
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, pad_mode="same")
        self.bn2 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()

    def construct(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + x)


class TinyResNet(nn.Cell):
    """Stem (conv-BN-ReLU-max pool), two residual blocks, then a head: ResNet's mean over H and W (``head="mean"``),
    or a Flatten of the 2x2 map before the classifier (``head="flatten"``: a real edge of the region)."""

    def __init__(self, head: str = "mean", c: int = 8, classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, stride=1, pad_mode="same")
        self.bn = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.block1 = Block(c)
        self.block2 = Block(c)
        self.head = head
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(c if head == "mean" else 4 * c, classes)

    def construct(self, x):
        x = self.pool(self.relu(self.bn(self.conv(x))))
        x = self.block2(self.block1(x))
        if self.head == "mean":
            x = self.mean(x, (2, 3))
        return self.fc(self.flatten(x))


def _data(batch=8, size=4):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(batch, 3, size, size)).astype(np.float32),
            rng.integers(0, 10, batch).astype(np.int32))


def _train(transform, mode="stand_alone", head="mean", steps=2, shard=None, dumps=None, ckpt=None):
    ms.context.reset_context()
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, format_transform=transform)
    if dumps is not None:
        ms.set_context(save_graphs=True, save_graphs_path=str(dumps))
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    ms.set_seed(0)
    net = TinyResNet(head)
    if shard is not None:
        shard(net)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.05, 0.9))
    x, y = _data()
    losses = [float(train(x, y)) for _ in range(steps)]
    if ckpt is not None:
        ms.save_checkpoint(net, str(ckpt))
    hlo = train.program.lower_step([x, y]).as_text()
    ms.context.reset_context()
    return losses, {p.name: p.asnumpy() for p in net.get_parameters()}, hlo


def _transposes(hlo: str) -> int:
    return len(re.findall(r"stablehlo\.transpose", hlo))


def _same(a, b, rtol=1e-5):
    (la, pa, _), (lb, pb, _) = a, b
    np.testing.assert_allclose(la, lb, rtol=rtol)
    assert pa.keys() == pb.keys()
    for name in pa:
        np.testing.assert_allclose(pa[name], pb[name], rtol=rtol, atol=1e-6, err_msg=name)


def test_the_setting_is_explicit_and_checked():
    assert channels_last.enabled("auto", "gpu") and not channels_last.enabled("auto", "cpu")
    assert not channels_last.enabled("auto", "tpu") and channels_last.enabled("channels_last", "cpu")
    assert not channels_last.enabled("off", "gpu")
    try:
        assert ms.get_context("format_transform") == "auto"
        ms.set_context(disable_format_transform=True)  # MindSpore's GPU switch
        assert ms.get_context("format_transform") == "off" and ms.get_context("disable_format_transform")
        ms.set_context(disable_format_transform=False)
        assert ms.get_context("format_transform") == "auto"
        with pytest.raises(ConfigError, match=r"format_transform.*'auto', 'channels_last', 'off'"):
            ms.set_context(format_transform="NHWC")
    finally:
        ms.context.reset_context()


def test_stand_alone_same_numbers_and_transposes_only_at_the_edges():
    off, on = _train("off"), _train("channels_last")
    _same(off, on)
    # the image enters the region once (no gradient flows back to it); the mean over H, W leaves (N, C) as written
    assert _transposes(on[2]) - _transposes(off[2]) == 1
    assert off[2].count("stablehlo.convolution") == on[2].count("stablehlo.convolution")
    assert "[0, b, 1, f]x[o, i, 0, 1]->[0, b, 1, f]" not in off[2]
    assert re.search(r"dim_numbers = \[b, 0, 1, f\]x\[o, i, 0, 1\]->\[b, 0, 1, f\]", on[2])


def test_a_flatten_is_an_edge_forward_and_backward():
    off, on = _train("off", head="flatten"), _train("channels_last", head="flatten")
    _same(off, on)
    # the image; the feature map before Flatten (an op whose order matters) and its gradient on the way back
    assert _transposes(on[2]) - _transposes(off[2]) == 3


def test_data_parallel_same_numbers():
    _same(_train("off", "data_parallel"), _train("channels_last", "data_parallel"))


def _split_channels(net):
    """Strategies that split channels: the stem convolution's output channels, a block's input channels (a
    contraction: partial sums) and its BatchNorm's channels, each over 2 of the 8 devices, batch over the rest."""
    net.conv.conv2d.shard(((4, 1, 1, 1), (2, 1, 1, 1)))
    net.block1.conv1.conv2d.shard(((4, 2, 1, 1), (1, 2, 1, 1)))
    net.block1.bn1.bn_train.shard(((4, 2, 1, 1), (2,), (2,), (2,), (2,)))


@pytest.mark.slow  # two 8-device compiles with dumps: ~25 s on a loaded 2-core machine
def test_semi_auto_with_channel_splits_same_numbers_and_dumps(tmp_path):
    off = _train("off", "semi_auto_parallel", shard=_split_channels, dumps=tmp_path / "off", ckpt=tmp_path / "off.ckpt")
    on = _train("channels_last", "semi_auto_parallel", shard=_split_channels, dumps=tmp_path / "on",
                ckpt=tmp_path / "on.ckpt")
    _same(off, on)
    # the begin dumps (strategies against the NCHW graph) are the same text, timings aside
    timing = re.compile(r"^# passes:.*$", re.M)
    for rank in ("rank_0", "rank_5"):
        found = [sorted((tmp_path / run / rank).glob("step_parallel_begin_*.ir")) for run in ("off", "on")]
        assert found[0] and len(found[0]) == len(found[1])
        for a, b in zip(*found):  # the graph counter runs on within the process: the n-th dump of each run
            assert timing.sub("", a.read_text()) == timing.sub("", b.read_text()), (a.name, b.name)
    # the execute dumps: the same collectives (kind, group, bytes, cause, op attributed) in the same order; only the
    # per-device shapes of those moving activations are the compiled program's own, channels-last
    shapes = re.compile(r" : \(<Tensor.*?(?=  # scope)")
    for rank in ("rank_0", "rank_5"):
        found = [sorted((tmp_path / run / rank).glob("18_execute_*.ir")) for run in ("off", "on")]
        assert found[0] and len(found[0]) == len(found[1])
        for a, b in zip(*found):
            a, b = (shapes.sub("", timing.sub("", f.read_text())) for f in (a, b))
            assert a == b and "AllReduce" in a and "AlltoAll" in a
    # checkpoints: the same names, shapes (OIHW kernels) and values
    a, b = ms.load_checkpoint(str(tmp_path / "off.ckpt")), ms.load_checkpoint(str(tmp_path / "on.ckpt"))
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].shape == b[name].shape
        np.testing.assert_allclose(a[name].asnumpy(), b[name].asnumpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert a["conv.weight"].shape == (8, 3, 3, 3)


def _relaid(fn, *args):
    """``fn``'s jaxpr evaluated by the pass (inputs as written, outputs brought back to the written layout) and as
    written; and the pass's analysis of it."""
    import jax

    closed = jax.make_jaxpr(fn)(*args)
    j = closed.jaxpr
    invars = [*j.constvars, *j.invars]
    layout = channels_last.analyse(invars, j.eqns, j.outvars, [None] * len(invars))
    outs = channels_last.evaluate(layout, invars, j.eqns, j.outvars, [*closed.consts, *args], [None] * len(invars))
    relaid = [channels_last.to_written(o, p) for o, p in zip(outs, layout.out)]
    return relaid, jax.core.eval_jaxpr(j, closed.consts, *args), layout


def _conv(x, w):
    from jax import lax

    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))


@pytest.mark.parametrize("name,after", [
    ("pad", lambda y: __import__("jax").lax.pad(y, 0.0, ((0, 0, 0), (1, 2, 0), (0, 1, 1), (2, 0, 0)))),
    ("concatenate", lambda y: __import__("jax.numpy").numpy.concatenate([y, 2 * y], axis=1)),
    ("slice", lambda y: y[:, 1:3, ::2, 1:]),
    ("rev", lambda y: y[:, ::-1, :, ::-1]),
    ("cumsum", lambda y: __import__("jax.numpy").numpy.cumsum(y, axis=1)),
    ("argmax", lambda y: __import__("jax.numpy").numpy.argmax(y, axis=1)),
    ("transpose", lambda y: y.transpose(0, 2, 3, 1).reshape(y.shape[0], -1)),
    ("max_pool", lambda y: __import__("jax").lax.reduce_window(y, -np.inf, __import__("jax").lax.max, (1, 1, 2, 2),
                                                               (1, 1, 2, 2), "SAME")),
    ("avg_pool_padded", lambda y: ops.AvgPool(3, 2, "same")(y)),
    ("batch_norm_and_relu", lambda y: ops.ReLU()(ops.BatchNorm(is_training=True)(
        y, np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32), np.ones(4, np.float32))[0])),
    ("mean_over_h_w", lambda y: y.mean(axis=(2, 3))),
    ("flatten", lambda y: y.reshape(y.shape[0], -1)),
    ("split_channels", lambda y: __import__("jax.numpy").numpy.split(y, 2, axis=1)[1] * 3.0),
])
def test_each_rule_computes_the_written_equation(name, after):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 5, 6)).astype(np.float32)
    w = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    relaid, written, layout = _relaid(lambda x, w: after(_conv(x, w)), x, w)
    assert layout.seeds == 1
    for a, b in zip(relaid, written):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5, err_msg=name)


def test_the_analysis_counts_edges():
    # the image enters the region (one edge); a flatten leaves it (one edge); a mean over H, W leaves nothing
    x, w = np.zeros((2, 3, 5, 6), np.float32), np.zeros((4, 3, 3, 3), np.float32)
    assert _relaid(lambda x, w: _conv(x, w).mean(axis=(2, 3)), x, w)[2].edges == 1
    assert _relaid(lambda x, w: _conv(x, w).reshape(2, -1), x, w)[2].edges == 2
    assert _relaid(lambda x, w: (x * 2).sum(), x, w)[2].changed is False  # no convolution: nothing moves
