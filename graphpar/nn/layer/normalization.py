"""Batch normalization layers: ``BatchNorm1d``, ``BatchNorm2d`` and ``SyncBatchNorm`` (MindSpore's names).

State. ``gamma`` and ``beta`` are trainable Parameters (``requires_grad=affine``); ``moving_mean`` and
``moving_variance`` are Parameters with ``requires_grad=False`` (named ``mean`` and ``variance`` until a parent Cell
prefixes them with their attribute path, e.g. ``bn1.moving_mean``, as in MindSpore checkpoints). In training mode
``construct`` normalizes with the batch statistics and *assigns* the new moving statistics to those Parameters::

    moving_mean     = momentum * moving_mean     + (1 - momentum) * batch_mean
    moving_variance = momentum * moving_variance + (1 - momentum) * batch_variance * n / (n - 1)

(n = the number of values each statistic covers). Inside a compiled train step the assignment lands in the step's
returned non-trainable state (``compile.state.NetworkState.split_after``), so the update happens on the device in
the same XLA program as the forward and backward pass; called eagerly it updates the Parameter at once.

The variance that feeds the moving average is the unbiased (Bessel-corrected) one, as MindSpore's GPU (cuDNN) and
Ascend kernels compute it; MindSpore's CPU kernel uses the biased variance there — the one difference between
MindSpore's own backends. Normalization itself always uses the biased batch variance.

Statistics under DATA_PARALLEL. ``BatchNorm2d`` computes them per device, over that device's slice of the batch
(MindSpore's behaviour). ``SyncBatchNorm`` computes them over the batches of all devices (or of each group in
``process_groups``): the per-device mean and variance are averaged over the data-parallel replica axis inside the
step. In STAND_ALONE, SEMI_AUTO_PARALLEL and AUTO_PARALLEL the graph holds the global batch, so both layers use the
statistics of the global batch. See docs/models.md.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from graphpar.common import dtype as mstype
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell
from graphpar.ops import nn_ops


def _check_number(value: Any, name: str, layer: str, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or \
            (high is not None and value > high):
        bounds = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{layer}: {name} must be a number {bounds}, got {value!r}")
    return float(value)


class _BatchNorm(Cell):
    """The shared implementation; subclasses fix the accepted input ranks (``_RANKS``)."""

    _RANKS: tuple[int, ...] = (4,)
    _SHAPE_TEXT = "(N, C, H, W)"

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.9, affine: bool = True,
                 gamma_init: Any = "ones", beta_init: Any = "zeros", moving_mean_init: Any = "zeros",
                 moving_var_init: Any = "ones", use_batch_statistics: bool | None = None,
                 data_format: str = "NCHW", dtype: Any = mstype.float32):
        super().__init__()
        layer = type(self).__name__
        if not isinstance(num_features, int) or isinstance(num_features, bool) or num_features < 1:
            raise ValueError(f"{layer}: num_features must be a positive int, got {num_features!r}")
        self.eps = _check_number(eps, "eps", layer, 0.0)
        self.momentum = _check_number(momentum, "momentum", layer, 0.0, 1.0)
        if use_batch_statistics is not None and not isinstance(use_batch_statistics, bool):
            raise ValueError(f"{layer}: use_batch_statistics must be True, False or None, got "
                             f"{use_batch_statistics!r}")
        if data_format != "NCHW":
            raise ValueError(f"{layer}: data_format={data_format!r} is not supported; valid: 'NCHW' (MindSpore "
                             "accepts 'NHWC' on GPU only)")
        self.num_features = num_features
        self.affine = bool(affine)
        self.use_batch_statistics = use_batch_statistics
        self.data_format = data_format
        self.moving_mean = Parameter(initializer(moving_mean_init, num_features, dtype), name="mean",
                                     requires_grad=False)
        self.moving_variance = Parameter(initializer(moving_var_init, num_features, dtype), name="variance",
                                         requires_grad=False)
        self.gamma = Parameter(initializer(gamma_init, num_features, dtype), name="gamma", requires_grad=affine)
        self.beta = Parameter(initializer(beta_init, num_features, dtype), name="beta", requires_grad=affine)
        # MindSpore's op takes the weight of the *new* value: momentum 0.9 in the layer is 0.1 in the op
        self.bn_train = self._train_op(1.0 - self.momentum)
        self.bn_infer = nn_ops.BatchNorm(is_training=False, epsilon=self.eps, momentum=1.0 - self.momentum,
                                         data_format=data_format)

    def _train_op(self, op_momentum: float) -> nn_ops.BatchNorm:
        return nn_ops.BatchNorm(is_training=True, epsilon=self.eps, momentum=op_momentum,
                                data_format=self.data_format)

    def _ranks_per_statistic(self) -> int:
        """How many devices' batches one batch statistic covers (1: this device's slice only)."""
        return 1

    def _check_input(self, x: Any) -> None:
        if x.ndim not in self._RANKS or x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}): expected an input of shape "
                             f"{self._SHAPE_TEXT} with C = {self.num_features}, got {tuple(x.shape)}")

    def construct(self, x):
        self._check_input(x)
        use_batch = self.training if self.use_batch_statistics is None else self.use_batch_statistics
        if not use_batch:
            return self.bn_infer(x, self.gamma, self.beta, self.moving_mean, self.moving_variance)[0]
        y, batch_mean, batch_var = self.bn_train(x, self.gamma, self.beta, self.moving_mean, self.moving_variance)
        self._update_moving_statistics(batch_mean, batch_var, x.size // x.shape[1] * self._ranks_per_statistic())
        return y

    def _update_moving_statistics(self, batch_mean: Any, batch_var: Any, count: int) -> None:
        """Assign momentum * moving + (1 - momentum) * batch to the moving Parameters (the variance unbiased)."""
        keep = self.momentum
        unbiased = batch_var * (count / max(count - 1, 1))
        mean_param, var_param = self.moving_mean, self.moving_variance
        old_mean, old_var = mean_param.get_value(), var_param.get_value()
        new_mean = keep * old_mean + (1.0 - keep) * batch_mean.astype(old_mean.dtype)
        new_var = keep * old_var + (1.0 - keep) * unbiased.astype(old_var.dtype)
        mean_param.set_value(jnp.asarray(new_mean, old_mean.dtype))
        var_param.set_value(jnp.asarray(new_var, old_var.dtype))

    def extend_repr(self) -> str:
        return (f"num_features={self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"gamma={self.gamma}, beta={self.beta}, moving_mean={self.moving_mean}, "
                f"moving_variance={self.moving_variance}")


class BatchNorm2d(_BatchNorm):
    """``BatchNorm2d(num_features, eps=1e-5, momentum=0.9, affine=True, gamma_init="ones", beta_init="zeros",
    moving_mean_init="zeros", moving_var_init="ones", use_batch_statistics=None, data_format="NCHW")`` over
    (N, C, H, W).

    ``use_batch_statistics``: None (default) uses batch statistics in training and the moving ones in evaluation;
    True always the batch's (and updates the moving statistics); False always the moving ones. Under
    DATA_PARALLEL the statistics are each device's own; use :class:`SyncBatchNorm` for statistics of the global
    batch.
    """


class BatchNorm1d(_BatchNorm):
    """``BatchNorm1d(num_features, ...)`` (same arguments as ``BatchNorm2d``) over (N, C) or (N, C, L)."""

    _RANKS = (2, 3)
    _SHAPE_TEXT = "(N, C) or (N, C, L)"


class SyncBatchNorm(_BatchNorm):
    """``SyncBatchNorm(num_features, eps=1e-5, momentum=0.9, affine=True, gamma_init="ones", beta_init="zeros",
    moving_mean_init="zeros", moving_var_init="ones", use_batch_statistics=None, process_groups=None)``.

    Batch normalization whose training statistics cover every device's batch: under DATA_PARALLEL the per-device
    mean and variance are averaged across devices inside the step (two small all-reduces per layer), so training on
    8 devices equals training on one device with the same global batch. ``process_groups`` (a list of equal-size
    lists of ranks covering every device) restricts the averaging to each group. Accepts (N, C, H, W) and (N, C).
    Elsewhere (STAND_ALONE, SEMI/AUTO) it is ``BatchNorm2d``: the graph already sees the global batch.
    """

    _RANKS = (2, 4)
    _SHAPE_TEXT = "(N, C, H, W) or (N, C)"

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.9, affine: bool = True,
                 gamma_init: Any = "ones", beta_init: Any = "zeros", moving_mean_init: Any = "zeros",
                 moving_var_init: Any = "ones", use_batch_statistics: bool | None = None,
                 process_groups: Any = None, dtype: Any = mstype.float32):
        self._groups = _process_groups(process_groups)
        super().__init__(num_features, eps, momentum, affine, gamma_init, beta_init, moving_mean_init,
                         moving_var_init, use_batch_statistics, "NCHW", dtype)

    def _train_op(self, op_momentum: float) -> nn_ops.BatchNorm:
        group_size = len(self._groups[0]) if self._groups else 0
        return nn_ops.SyncBatchNorm(epsilon=self.eps, momentum=op_momentum, group="sync_bn_group0",
                                    device_num=group_size, groups=self._groups)

    def _ranks_per_statistic(self) -> int:
        return self.bn_train.ranks_per_group()


def _process_groups(process_groups: Any) -> tuple[tuple[int, ...], ...] | None:
    """``None`` (every device) or equal-size, disjoint groups of ranks as a tuple of tuples."""
    if process_groups is None:
        return None
    try:
        groups = tuple(tuple(int(r) for r in g) for g in process_groups)
    except TypeError:
        groups = ()
    sizes = {len(g) for g in groups}
    ranks = [r for g in groups for r in g]
    if not groups or len(sizes) != 1 or 0 in sizes or len(set(ranks)) != len(ranks) or min(ranks) < 0:
        raise ValueError(f"SyncBatchNorm: process_groups must be None (all devices) or a list of equal-size, "
                         f"disjoint lists of ranks, e.g. [[0, 1, 2, 3], [4, 5, 6, 7]]; got {process_groups!r}")
    return groups


class LayerNorm(Cell):
    """``nn.LayerNorm(normalized_shape, begin_norm_axis=-1, begin_params_axis=-1, gamma_init='ones',
    beta_init='zeros', epsilon=1e-7)``: MindSpore's layer, Parameters ``gamma`` and ``beta`` of ``normalized_shape``,
    the primitive as ``self.layer_norm`` so scripts shard it as MindSpore's (``layer_norm.shard(((dp, 1, 1), (1,),
    (1,)))``)."""

    def __init__(self, normalized_shape: Any, begin_norm_axis: int = -1, begin_params_axis: int = -1,
                 gamma_init: Any = "ones", beta_init: Any = "zeros", epsilon: float = 1e-7,
                 dtype: Any = mstype.float32):
        super().__init__()
        if not isinstance(normalized_shape, (tuple, list)) or not normalized_shape or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in normalized_shape):
            raise TypeError(f"LayerNorm: normalized_shape must be a non-empty tuple or list of positive ints, got "
                            f"{normalized_shape!r}")
        for name, axis in (("begin_norm_axis", begin_norm_axis), ("begin_params_axis", begin_params_axis)):
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise TypeError(f"LayerNorm: {name} must be an int, got {axis!r}")
        self.normalized_shape = tuple(normalized_shape)
        self.begin_norm_axis, self.begin_params_axis = begin_norm_axis, begin_params_axis
        self.epsilon = _check_number(epsilon, "epsilon", "LayerNorm", 0.0)
        self.gamma = Parameter(initializer(gamma_init, self.normalized_shape, dtype), name="gamma")
        self.beta = Parameter(initializer(beta_init, self.normalized_shape, dtype), name="beta")
        self.layer_norm = nn_ops.LayerNorm(begin_norm_axis, begin_params_axis, self.epsilon)

    def construct(self, input_x):
        y, _, _ = self.layer_norm(input_x, self.gamma, self.beta)
        return y
