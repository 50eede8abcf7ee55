"""Neural-network primitives (MindSpore's nn ops): activations, softmax, convolution, pooling, normalization."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from graphpar.communication import collectives
from graphpar.communication.rank_axis import current_rank_axis
from graphpar.ops.array_ops import OneHot
from graphpar.ops.math_ops import _Unary
from graphpar.ops.primitive import Primitive
from graphpar.ops.random_ops import Dropout as Dropout  # noqa: F401 (MindSpore's nn op, re-exported)
from graphpar.ops.runtime_checks import check_index_range


def relu(x: jax.Array) -> jax.Array:
    """``max(x, 0)`` written as a select, so that its derivative is the select's own: 1 above 0 and 0 at and
    below it (MindSpore's ReluGrad, ``dy * (y > 0)``), NaN propagating as ``max`` does. ``jax.nn.relu`` gets the
    same values from a ``custom_jvp``, whose rule JAX traces per call and graphpar's lowering must trace to tell
    two ReLU bodies alike: a third of the lowering of a deep ReLU network, for nothing a select does not give."""
    x = jnp.asarray(x)
    zero = lax.full_like(x, 0)
    return lax.select(x <= zero, zero, x)


class ReLU(_Unary):
    fn = staticmethod(relu)


class ReLU6(_Unary):
    fn = staticmethod(jax.nn.relu6)


class GeLU(_Unary):
    """GeLU with the tanh approximation (MindSpore's ``ops.GeLU``)."""

    fn = staticmethod(lambda x: jax.nn.gelu(x, approximate=True))


class FastGeLU(_Unary):
    fn = staticmethod(lambda x: x * jax.nn.sigmoid(1.702 * x))


class SiLU(_Unary):
    fn = staticmethod(jax.nn.silu)


class Softmax(Primitive):
    """``Softmax(axis=-1)(x)``."""

    def __init__(self, axis: Any = -1):
        super().__init__(axis=axis)

    def compute(self, x):
        return jax.nn.softmax(x, axis=self.attrs["axis"])


class LogSoftmax(Softmax):
    def compute(self, x):
        return jax.nn.log_softmax(x, axis=self.attrs["axis"])


class BiasAdd(Primitive):
    """``BiasAdd(data_format="NCHW")(x, bias)``: add ``bias`` along the channel dimension (1 for NC..., last for
    N...C)."""

    input_names = ("x", "bias")

    def __init__(self, data_format: str = "NCHW"):
        super().__init__(data_format=data_format)

    def compute(self, x, bias):
        if x.ndim <= 2 or self.attrs["data_format"] in ("NHWC",):
            return x + bias
        return x + jnp.reshape(bias, (1, -1) + (1,) * (x.ndim - 2))


def _pair(v: Any, name: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) == 2:
        return v
    if len(v) == 4:
        return (v[2], v[3])
    raise ValueError(f"{name} must be an int, a pair or a 4-tuple, got {v!r}")


def nc_stride(v: Any) -> dict[str, tuple[int, int]]:
    """A 4-tuple stride's (N, C) elements, kept as the ``stride_nc`` attr where they are not (1, 1): the
    convolution strides H and W only, and a parallel strategy refuses the others as MindSpore's does."""
    if not isinstance(v, int) and len(tuple(v)) == 4 and tuple(v)[:2] != (1, 1):
        return {"stride_nc": tuple(v)[:2]}
    return {}


def conv_padding(pad_mode: str, pad: Any) -> Any:
    """MindSpore pad_mode/pad to a lax padding argument."""
    mode = pad_mode.lower()
    if mode == "same":
        return "SAME"
    if mode == "valid":
        return "VALID"
    if mode == "pad":
        if isinstance(pad, int):
            return ((pad, pad), (pad, pad))
        top, bottom, left, right = pad
        return ((top, bottom), (left, right))
    raise ValueError(f"pad_mode must be 'same', 'valid' or 'pad', got {pad_mode!r}")


class Conv2D(Primitive):
    """``Conv2D(out_channel, kernel_size, mode=1, pad_mode="valid", pad=0, stride=1, dilation=1, group=1,
    data_format="NCHW")(x, weight)``; weight is (out_channel, in_channel / group, kh, kw), as MindSpore."""

    input_names = ("x", "weight")

    def __init__(self, out_channel: int, kernel_size: Any, mode: int = 1, pad_mode: str = "valid", pad: Any = 0,
                 stride: Any = 1, dilation: Any = 1, group: int = 1, data_format: str = "NCHW"):
        if data_format != "NCHW":
            raise ValueError(f"Conv2D: data_format {data_format!r} is not supported; valid: 'NCHW'")
        super().__init__(out_channel=out_channel, kernel_size=_pair(kernel_size, "kernel_size"), mode=mode,
                         pad_mode=pad_mode.lower(), pad=pad, stride=_pair(stride, "stride"),
                         dilation=_pair(dilation, "dilation"), group=group, data_format=data_format,
                         **nc_stride(stride))

    def compute(self, x, weight):
        a = self.attrs
        return lax.conv_general_dilated(
            x, weight, window_strides=a["stride"], padding=conv_padding(a["pad_mode"], a["pad"]),
            rhs_dilation=a["dilation"], dimension_numbers=("NCHW", "OIHW", "NCHW"),
            feature_group_count=a["group"])


class _Pool(Primitive):
    def __init__(self, kernel_size: Any = 1, strides: Any = 1, pad_mode: str = "valid",
                 data_format: str = "NCHW"):
        if data_format != "NCHW":
            raise ValueError(f"{type(self).__name__}: data_format {data_format!r} is not supported; valid: 'NCHW'")
        super().__init__(kernel_size=_pair(kernel_size, "kernel_size"), strides=_pair(strides, "strides"),
                         pad_mode=pad_mode.lower(), data_format=data_format)

    def _window(self):
        kh, kw = self.attrs["kernel_size"]
        sh, sw = self.attrs["strides"]
        padding = "SAME" if self.attrs["pad_mode"] == "same" else "VALID"
        return (1, 1, kh, kw), (1, 1, sh, sw), padding


class MaxPool(_Pool):
    """``MaxPool(kernel_size=1, strides=1, pad_mode="valid")(x)`` on NCHW."""

    def compute(self, x):
        dims, strides, padding = self._window()
        return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, padding)


class AvgPool(_Pool):
    """``AvgPool(kernel_size=1, strides=1, pad_mode="valid")(x)`` on NCHW; padded cells are not counted."""

    def compute(self, x):
        dims, strides, padding = self._window()
        total = lax.reduce_window(x, 0.0, lax.add, dims, strides, padding)
        if padding == "VALID":
            return total / (dims[2] * dims[3])
        count = lax.reduce_window(jnp.ones(x.shape[2:], x.dtype), 0.0, lax.add, dims[2:], strides[2:], padding)
        return total / count


class BatchNorm(Primitive):
    """``BatchNorm(is_training=False, epsilon=1e-5, momentum=0.1, data_format="NCHW")(x, scale, bias, mean,
    variance)`` → ``(y, batch_mean, batch_variance)``.

    In training the batch statistics normalize ``x`` (the biased variance) and are returned so the Cell can update
    its moving statistics; otherwise ``mean``/``variance`` are used. Unlike MindSpore the op never writes its
    inputs: state updates are explicit (see ``nn.BatchNorm2d``).
    """

    input_names = ("x", "scale", "bias", "mean", "variance")

    def __init__(self, is_training: bool = False, epsilon: float = 1e-5, momentum: float = 0.1,
                 data_format: str = "NCHW"):
        super().__init__(is_training=is_training, epsilon=epsilon, momentum=momentum, data_format=data_format)

    def compute(self, x, scale, bias, mean, variance):
        axes = tuple(i for i in range(x.ndim) if i != 1)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        if self.attrs["is_training"]:
            batch_mean = jnp.mean(x, axis=axes)
            batch_var = jnp.mean(jnp.square(x - jnp.reshape(batch_mean, shape)), axis=axes)
        else:
            batch_mean, batch_var = mean, variance
        inv = lax.rsqrt(batch_var + self.attrs["epsilon"]) * scale
        y = (x - jnp.reshape(batch_mean, shape)) * jnp.reshape(inv, shape) + jnp.reshape(bias, shape)
        return y, batch_mean, batch_var


def _batch_moments(x, mean_over_ranks):
    """Mean and biased variance over every dimension but 1; ``mean_over_ranks`` averages a per-rank statistic
    over the ranks whose batches are normalized together (the identity for one rank)."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = mean_over_ranks(jnp.mean(x, axis=axes))
    # two passes (centre on the global mean first): the same rounding as one device holding the whole batch
    var = mean_over_ranks(jnp.mean(jnp.square(x - jnp.reshape(mean, shape)), axis=axes))
    return mean, var


class SyncBatchNorm(BatchNorm):
    """``SyncBatchNorm(epsilon=1e-5, momentum=0.1, group="sync_bn_group0", device_num=2)(x, scale, bias, mean,
    variance)`` → ``(y, mean, variance)``: training-mode batch normalization whose statistics cover the batches of
    every rank in the group (MindSpore's inner op behind ``nn.SyncBatchNorm``).

    Where the code runs once per rank (DATA_PARALLEL's per-device loss, a per-rank call; see
    ``graphpar.communication.rank_axis``) the per-rank mean and variance are averaged over the rank axis — over all ranks
    (``groups=None``), or within each block of ``groups`` (equal-size tuples of ranks). Elsewhere (STAND_ALONE,
    SEMI_AUTO/AUTO) the graph already holds the global batch and this is plain ``BatchNorm``. The per-rank batches
    must have equal sizes (they do: DATA_PARALLEL splits the global batch evenly).
    """

    def __init__(self, epsilon: float = 1e-5, momentum: float = 0.1, group: str = "sync_bn_group0",
                 device_num: int = 2, groups: Any = None):
        Primitive.__init__(self, is_training=True, epsilon=epsilon, momentum=momentum, group=group,
                           device_num=device_num, groups=groups)

    def ranks_per_group(self) -> int:
        """How many ranks' batches one statistic covers, in the code being traced now (1 outside a per-rank run)."""
        axis = current_rank_axis()
        if axis is None:
            return 1
        groups = self.attrs["groups"]
        return jax.lax.axis_size(axis.name) if groups is None else len(groups[0])

    def _mean_over_ranks(self, v):
        axis = current_rank_axis()
        if axis is None:
            return v
        groups = self.attrs["groups"]
        if groups is None:
            return jax.lax.pmean(v, axis.name)
        world = jax.lax.axis_size(axis.name)
        if sorted(r for g in groups for r in g) != list(range(world)):
            raise ValueError(f"SyncBatchNorm ('{self.instance_name}'): process_groups {list(map(list, groups))} "
                             f"must cover ranks 0..{world - 1} of this run exactly once")
        return collectives.all_reduce(v, "sum", axis, groups) / len(groups[0])

    def compute(self, x, scale, bias, mean, variance):
        shape = (1, -1) + (1,) * (x.ndim - 2)
        batch_mean, batch_var = _batch_moments(x, self._mean_over_ranks)
        inv = lax.rsqrt(batch_var + self.attrs["epsilon"]) * scale
        y = (x - jnp.reshape(batch_mean, shape)) * jnp.reshape(inv, shape) + jnp.reshape(bias, shape)
        return y, batch_mean, batch_var


class AdaptiveAvgPool2D(Primitive):
    """``AdaptiveAvgPool2D(output_size)(x)`` on (N, C, H, W) or (C, H, W): output cell ``i`` averages input rows
    ``floor(i*H/out) .. ceil((i+1)*H/out) - 1`` (and alike for columns), as MindSpore. ``None`` in
    ``output_size`` keeps that dimension."""

    def __init__(self, output_size: Any):
        size = (output_size, output_size) if isinstance(output_size, int) or output_size is None \
            else tuple(output_size)
        if len(size) != 2 or any(s is not None and (not isinstance(s, int) or s < 1) for s in size):
            raise ValueError(f"AdaptiveAvgPool2D: output_size must be a positive int, None or a pair of them, got "
                             f"{output_size!r}")
        super().__init__(output_size=size)

    @staticmethod
    def _weights(n_in: int, n_out: int) -> np.ndarray:
        """(n_out, n_in) averaging matrix of the adaptive windows."""
        w = np.zeros((n_out, n_in), np.float32)
        for i in range(n_out):
            lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
            w[i, lo:hi] = 1.0 / (hi - lo)
        return w

    def compute(self, x):
        if x.ndim not in (3, 4):
            raise ValueError(f"AdaptiveAvgPool2D: input must be (N, C, H, W) or (C, H, W), got shape {x.shape}")
        h, w = x.shape[-2:]
        oh, ow = (s if s is not None else d for s, d in zip(self.attrs["output_size"], (h, w)))
        if h % oh == 0 and w % ow == 0:  # equal windows: a reshape and a mean
            lead = x.shape[:-2]
            return jnp.mean(jnp.reshape(x, lead + (oh, h // oh, ow, w // ow)), axis=(-3, -1))
        wh = jnp.asarray(self._weights(h, oh), x.dtype)
        ww = jnp.asarray(self._weights(w, ow), x.dtype)
        return jnp.einsum("...hw,oh,pw->...op", x, wh, ww)


class LayerNorm(Primitive):
    """``LayerNorm(begin_norm_axis=1, begin_params_axis=1, epsilon=1e-7)(x, gamma, beta)`` → (y, mean, var)."""

    input_names = ("x", "gamma", "beta")

    def __init__(self, begin_norm_axis: int = 1, begin_params_axis: int = 1, epsilon: float = 1e-7):
        super().__init__(begin_norm_axis=begin_norm_axis, begin_params_axis=begin_params_axis, epsilon=epsilon)

    def compute(self, x, gamma, beta):
        axes = tuple(range(self.attrs["begin_norm_axis"] % x.ndim, x.ndim))
        mean = jnp.mean(x, axis=axes, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
        y = (x - mean) * lax.rsqrt(var + self.attrs["epsilon"]) * gamma + beta
        return y, mean, var


class SoftmaxCrossEntropyWithLogits(Primitive):
    """``SoftmaxCrossEntropyWithLogits()(logits, labels)`` → ``(loss, dlogits)`` with one-hot ``labels``."""

    input_names = ("logits", "labels")

    def compute(self, logits, labels):
        log_p = jax.nn.log_softmax(logits, axis=-1)
        loss = -jnp.sum(labels * log_p, axis=-1)
        return loss, jnp.exp(log_p) - labels


class SparseSoftmaxCrossEntropyWithLogits(Primitive):
    """``SparseSoftmaxCrossEntropyWithLogits(is_grad=False)(logits, labels)`` → mean loss over the batch. Labels
    outside ``[0, classes)`` are refused after the step (``ops.runtime_checks``), as MindSpore's kernel refuses
    them (unchecked, the gather below reads -1 as the last class and fills a label past the end with NaN)."""

    input_names = ("logits", "labels")

    def __init__(self, is_grad: bool = False):
        super().__init__(is_grad=is_grad)

    def compute(self, logits, labels):
        if not jnp.issubdtype(labels.dtype, jnp.integer):  # MindSpore's kernel takes int32/int64 only
            raise TypeError(f"SparseSoftmaxCrossEntropyWithLogits: labels are class indices and must have an integer "
                            f"dtype (int32 or int64), got {labels.dtype}; a float label would be truncated to a class")
        check_index_range(labels, logits.shape[-1], self, "labels")  # raised lazily, after the step
        log_p = jax.nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(log_p, labels.astype(jnp.int32)[..., None], axis=-1)[..., 0]
        return -jnp.mean(picked)


class LabelOneHot(OneHot):
    """``OneHot`` of class labels, which must lie in ``[0, depth)`` (``nn.SoftmaxCrossEntropyWithLogits(sparse=True)``
    takes its one-hot labels from it). A plain ``OneHot`` maps an out-of-range index to an all-off row, as
    MindSpore's does; for labels that row makes the sample's loss and gradient 0, where MindSpore's sparse kernel
    raises, so this one records a range check (``ops.runtime_checks``). Its kind stays ``OneHot``: the same sharding
    rule, the same node in the dumps."""

    @property
    def name(self) -> str:
        return "OneHot"

    def compute(self, indices, depth, on_value, off_value):
        check_index_range(indices, int(depth), self, "labels")  # raised lazily, after the step
        return super().compute(indices, depth, on_value, off_value)


class L2Normalize(Primitive):
    """``L2Normalize(axis=0, epsilon=1e-4)(x)``."""

    def __init__(self, axis: int = 0, epsilon: float = 1e-4):
        super().__init__(axis=axis, epsilon=epsilon)

    def compute(self, x):
        norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=self.attrs["axis"], keepdims=True))
        return x / jnp.maximum(norm, self.attrs["epsilon"])
