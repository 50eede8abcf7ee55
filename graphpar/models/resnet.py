"""ResNet-18/34/50/101 laid out like MindSpore's ResNet sample (docs ``sample_code/resnet/resnet.py`` and
``sample_code/distributed_training/resnet.py``, where the tutorials' ``resnet50(batch_size, num_classes)`` comes
from), so parameter names, op instance names and IR scopes read as in MindSpore:

* stem ``conv1`` (7×7, stride 2, "same") → ``bn1`` → ``relu`` → ``maxpool`` (3×3, stride 2, "same");
* ``layer1`` … ``layer4`` (``MakeLayer0`` … ``MakeLayer3``) hold blocks ``a``, ``b``, ``c``, …; block ``a`` of
  each layer carries the projection shortcut ``conv_down_sample``/``bn_down_sample`` when the shape changes, and the
  stride (on its first convolution, as in the sample);
* bottleneck blocks (ResNet-50/101, ``ResidualBlock``): ``conv1`` 1×1 → ``conv2`` 3×3 → ``conv3`` 1×1 with
  ``bn1``-``bn3``; basic blocks (ResNet-18/34, ``ResidualBlockBase``): ``conv1`` 3×3 → ``conv2`` 3×3;
* head ``pool`` (ReduceMean over H, W, keep_dims) → ``squeeze`` → ``fc``.

Initial values follow one of two MindSpore sources (an :class:`Init` recipe; docs/models.md compares them):

* ``resnet50`` is the docs sample's (``Init.SAMPLE``): convolutions ``XavierUniform``, BatchNorm
  ``momentum=0.99``, ``eps=1e-5``, gamma ``Uniform`` (±0.07), beta 0, moving mean 0, moving variance 1; ``fc``
  weight ``XavierUniform``, bias ``Uniform``. With gamma that small the first logits are near zero and the first
  loss is close to ln(10) ≈ 2.3026, as in the tutorials' logs.
* ``resnet18``/``resnet34``/``resnet101`` (the sample writes ResNet-50 only) follow MindSpore's model-zoo ResNet
  (``models/official/cv/ResNet/src/resnet.py``; ``Init.MODEL_ZOO``): convolutions He-normal (fan_out, ReLU gain);
  every BatchNorm gamma 1 (the last one of each block too), beta 0, moving mean 0, moving variance 1; block
  BatchNorms ``momentum=0.9``, ``eps=1e-4``; for the basic-block nets (the zoo's ``res_base``) the stem and
  projection BatchNorms ``momentum=0.1``, ``eps=1e-5``; ``fc`` weight He-uniform (a=√5), bias 0.

Two knobs that MindSpore's sample lacks: ``width`` multiplies every channel count (``width=0.25`` gives a ResNet-50
with stem 16 and stage widths 64…512, for tests and CPU runs), and ``sync_bn=True`` builds every BatchNorm as
:class:`graphpar.nn.SyncBatchNorm` (statistics of the global batch under DATA_PARALLEL; see docs/models.md).
"""

from __future__ import annotations

import string
import math
from dataclasses import dataclass
from typing import Any

from graphpar import nn, ops
from graphpar.common.initializer import HeNormal, HeUniform

_STAGE_WIDTHS = (64, 128, 256, 512)
_LETTERS = string.ascii_lowercase


def _channels(base: int, width: float) -> int:
    return max(1, int(round(base * width)))


@dataclass(frozen=True)
class BatchNormInit:
    momentum: float
    eps: float
    gamma: Any


@dataclass(frozen=True)
class Init:
    """How a ResNet's layers are initialised (the source it follows)."""

    name: str
    conv_weight: Any
    block_bn: BatchNormInit  # BatchNorms inside residual blocks
    outer_bn: BatchNormInit  # the stem's and the projection shortcuts'
    fc_weight: Any
    fc_bias: Any


_SAMPLE_BN = BatchNormInit(0.99, 1e-5, "Uniform")
Init.SAMPLE = Init("docs sample", "XavierUniform", _SAMPLE_BN, _SAMPLE_BN, "XavierUniform", "Uniform")
_ZOO_BN = BatchNormInit(0.9, 1e-4, "ones")
Init.MODEL_ZOO = Init("model zoo", HeNormal(mode="fan_out", nonlinearity="relu"), _ZOO_BN, _ZOO_BN,
                      HeUniform(negative_slope=math.sqrt(5)), "zeros")
# the zoo's basic-block nets (res_base=True): stem and projection BatchNorms follow the new batch closely
Init.MODEL_ZOO_BASIC = Init("model zoo (res_base)", Init.MODEL_ZOO.conv_weight, _ZOO_BN,
                            BatchNormInit(0.1, 1e-5, "ones"), Init.MODEL_ZOO.fc_weight, "zeros")


def _conv(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
          init: Init = Init.SAMPLE) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=0,
                     weight_init=init.conv_weight, has_bias=False, pad_mode="same")


def _bn(channels: int, sync_bn: bool, how: BatchNormInit = _SAMPLE_BN) -> nn.Cell:
    layer = nn.SyncBatchNorm if sync_bn else nn.BatchNorm2d
    return layer(channels, momentum=how.momentum, eps=how.eps, gamma_init=how.gamma, beta_init="zeros",
                 moving_mean_init="zeros", moving_var_init="ones")


class _Block(nn.Cell):
    """A residual block: ``relu(add(residual(x), shortcut(x)))``; the shortcut is the identity here."""

    expansion = 1

    def residual(self, x):
        raise NotImplementedError

    def shortcut(self, x):
        return x

    def construct(self, x):
        return self.relu(self.add(self.residual(x), self.shortcut(x)))


class ResidualBlock(_Block):
    """Bottleneck block (expansion 4): 1×1 (carrying the stride) → 3×3 → 1×1, added to the shortcut, ReLU."""

    expansion = 4

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, sync_bn: bool = False,
                 init: Init = Init.SAMPLE):
        super().__init__()
        inner = out_channels // self.expansion
        self.conv1 = _conv(in_channels, inner, 1, stride, init)
        self.bn1 = _bn(inner, sync_bn, init.block_bn)
        self.conv2 = _conv(inner, inner, 3, 1, init)
        self.bn2 = _bn(inner, sync_bn, init.block_bn)
        self.conv3 = _conv(inner, out_channels, 1, 1, init)
        self.bn3 = _bn(out_channels, sync_bn, init.block_bn)
        self.relu = ops.ReLU()
        self.add = ops.Add()

    def residual(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


class ResidualBlockBase(_Block):
    """Basic block (expansion 1): 3×3 (carrying the stride) → 3×3, added to the shortcut, ReLU."""

    expansion = 1

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, sync_bn: bool = False,
                 init: Init = Init.SAMPLE):
        super().__init__()
        self.conv1 = _conv(in_channels, out_channels, 3, stride, init)
        self.bn1 = _bn(out_channels, sync_bn, init.block_bn)
        self.conv2 = _conv(out_channels, out_channels, 3, 1, init)
        self.bn2 = _bn(out_channels, sync_bn, init.block_bn)
        self.relu = ops.ReLU()
        self.add = ops.Add()

    def residual(self, x):
        return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))


def _with_down_sample(block: type[_Block]) -> type[_Block]:
    """``block`` plus the projection shortcut (the sample's ``ResidualBlockWithDown``)."""

    class ResidualBlockWithDown(block):  # type: ignore[valid-type, misc]
        def __init__(self, in_channels: int, out_channels: int, stride: int = 1, sync_bn: bool = False,
                     init: Init = Init.SAMPLE):
            super().__init__(in_channels, out_channels, stride, sync_bn, init)
            self.conv_down_sample = _conv(in_channels, out_channels, 1, stride, init)
            self.bn_down_sample = _bn(out_channels, sync_bn, init.outer_bn)

        def shortcut(self, x):
            return self.bn_down_sample(self.conv_down_sample(x))

    ResidualBlockWithDown.__qualname__ = ResidualBlockWithDown.__name__
    return ResidualBlockWithDown


_DOWN = {ResidualBlock: _with_down_sample(ResidualBlock), ResidualBlockBase: _with_down_sample(ResidualBlockBase)}


class _MakeLayer(nn.Cell):
    """One stage: blocks ``a``, ``b``, ``c``, … ; ``a`` takes the stride and, if needed, the projection."""

    def __init__(self, block: type[_Block], n_blocks: int, in_channels: int, out_channels: int, stride: int,
                 sync_bn: bool, init: Init = Init.SAMPLE):
        super().__init__()
        if not 1 <= n_blocks <= len(_LETTERS):
            raise ValueError(f"ResNet: a layer holds 1 to {len(_LETTERS)} blocks, got {n_blocks}")
        first = _DOWN[block] if stride != 1 or in_channels != out_channels else block
        self.a = first(in_channels, out_channels, stride, sync_bn, init)
        for letter in _LETTERS[1:n_blocks]:
            setattr(self, letter, block(out_channels, out_channels, 1, sync_bn, init))

    def construct(self, x):
        for cell in self.cells():
            x = cell(x)
        return x


class MakeLayer0(_MakeLayer):
    """``layer1``."""


class MakeLayer1(_MakeLayer):
    """``layer2``."""


class MakeLayer2(_MakeLayer):
    """``layer3``."""


class MakeLayer3(_MakeLayer):
    """``layer4``."""


class ResNet(nn.Cell):
    """``ResNet(block, layer_nums, num_classes=10, width=1.0, sync_bn=False, batch_size=None, init=Init.SAMPLE)``.

    ``block`` is :class:`ResidualBlock` (bottleneck) or :class:`ResidualBlockBase` (basic); ``layer_nums`` the four
    block counts. Input (N, 3, H, W) with H, W >= 1 (32×32 CIFAR images work: the last stage is 1×1); output
    (N, num_classes) logits. ``batch_size`` is accepted for the sample's signature and not used. ``init`` says
    which source's initial values to use (:class:`Init`).
    """

    def __init__(self, block: type[_Block], layer_nums: tuple[int, ...], num_classes: int = 10,
                 width: float = 1.0, sync_bn: bool = False, batch_size: int | None = None,
                 init: Init = Init.SAMPLE):
        super().__init__()
        if block not in _DOWN:
            raise ValueError(f"ResNet: block must be ResidualBlock or ResidualBlockBase, got {block!r}")
        if len(layer_nums) != 4:
            raise ValueError(f"ResNet: layer_nums must give 4 block counts, got {layer_nums!r}")
        if isinstance(width, bool) or not isinstance(width, (int, float)) or width <= 0:
            raise ValueError(f"ResNet: width must be a number > 0 (a channel multiplier), got {width!r}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"ResNet: the class count must be a positive int, got {num_classes!r}")
        self.batch_size, self.num_classes, self.width = batch_size, num_classes, float(width)
        stem = _channels(64, width)
        self.conv1 = _conv(3, stem, 7, 2, init)
        self.bn1 = _bn(stem, sync_bn, init.outer_bn)
        self.relu = ops.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        in_channels = stem
        stages = (MakeLayer0, MakeLayer1, MakeLayer2, MakeLayer3)
        for i, (stage, n_blocks, base) in enumerate(zip(stages, layer_nums, _STAGE_WIDTHS)):
            out_channels = _channels(base, width) * block.expansion
            setattr(self, f"layer{i + 1}", stage(block, n_blocks, in_channels, out_channels, 1 if i == 0 else 2,
                                                 sync_bn, init))
            in_channels = out_channels
        self.pool = ops.ReduceMean(keep_dims=True)
        self.squeeze = ops.Squeeze(axis=(2, 3))
        self.fc = nn.Dense(in_channels, num_classes, weight_init=init.fc_weight, bias_init=init.fc_bias)

    def construct(self, x):
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"ResNet: expected images of shape (N, 3, H, W), got {tuple(x.shape)}")
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.pool(x, (2, 3))
        x = self.squeeze(x)
        return self.fc(x)


def _class_count(fn: str, args: tuple, class_num: Any, num_classes: Any, batch_size: Any) -> tuple[int, Any]:
    """(class count, batch size) from the two call conventions MindSpore code uses:
    ``resnet50(batch_size, num_classes)`` (the tutorials' sample) and ``resnet50(class_num=10)`` (the model zoo)."""
    if len(args) > 2:
        raise TypeError(f"{fn}() takes (batch_size, num_classes) or (class_num) positionally, got {len(args)} "
                        "arguments")
    if len(args) == 2:
        if batch_size is not None or num_classes is not None:
            raise TypeError(f"{fn}(batch_size, num_classes): batch_size/num_classes given twice")
        batch_size, num_classes = args
    elif len(args) == 1:
        if class_num is not None:
            raise TypeError(f"{fn}(): class_num given twice")
        class_num = args[0]
    given = [v for v in (class_num, num_classes) if v is not None]
    if len(given) == 2 and given[0] != given[1]:
        raise TypeError(f"{fn}(): class_num={class_num} and num_classes={num_classes} disagree")
    return (given[0] if given else 10), batch_size


def _factory(fn: str, block: type[_Block], layer_nums: tuple[int, ...], init: Init):
    def build(*args: Any, class_num: int | None = None, num_classes: int | None = None,
              batch_size: int | None = None, width: float = 1.0, sync_bn: bool = False) -> ResNet:
        classes, batch = _class_count(fn, args, class_num, num_classes, batch_size)
        return ResNet(block, layer_nums, classes, width=width, sync_bn=sync_bn, batch_size=batch, init=init)

    build.__name__ = build.__qualname__ = fn
    build.__doc__ = (f"``{fn}(class_num=10, width=1.0, sync_bn=False)`` or ``{fn}(batch_size, num_classes)``: "
                     f"a {block.__name__} ResNet with blocks {layer_nums}, initialised as MindSpore's {init.name} "
                     "(see :class:`ResNet`).")
    return build


resnet18 = _factory("resnet18", ResidualBlockBase, (2, 2, 2, 2), Init.MODEL_ZOO_BASIC)
resnet34 = _factory("resnet34", ResidualBlockBase, (3, 4, 6, 3), Init.MODEL_ZOO_BASIC)
resnet50 = _factory("resnet50", ResidualBlock, (3, 4, 6, 3), Init.SAMPLE)
resnet101 = _factory("resnet101", ResidualBlock, (3, 4, 23, 3), Init.MODEL_ZOO)
