"""Basic layers: Dense, activations, Flatten, Dropout (MindSpore's ``nn`` names, arguments and defaults)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from graphpar.common import dtype as mstype
from graphpar.common.initializer import HeUniform, Uniform, initializer
from graphpar.common.parameter import Parameter
from graphpar.communication.rank_axis import fold_in_replica
from graphpar.nn.cell import Cell
from graphpar.ops import array_ops, math_ops, nn_ops, random_ops
from graphpar.ops.random_ops import RngKey, new_key


class ReLU(Cell):
    def __init__(self):
        super().__init__()
        self.relu = nn_ops.ReLU()

    def construct(self, x):
        return self.relu(x)


class ReLU6(Cell):
    def __init__(self):
        super().__init__()
        self.relu6 = nn_ops.ReLU6()

    def construct(self, x):
        return self.relu6(x)


class GELU(Cell):
    """``GELU(approximate=True)``: tanh approximation by default, exact erf form with ``approximate=False``."""

    def __init__(self, approximate: bool = True):
        super().__init__()
        self.approximate = approximate
        self.gelu = nn_ops.GeLU()

    def construct(self, x):
        if self.approximate:
            return self.gelu(x)
        return jax.nn.gelu(x, approximate=False)


class FastGelu(Cell):
    """MindSpore's ``nn.FastGelu``: ``x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))``, the ``FastGeLU`` op
    (``get_activation("fast_gelu")``, the activation of Pangu-alpha's and MindSpore's transformer FeedForward)."""

    def __init__(self):
        super().__init__()
        self.fast_gelu = nn_ops.FastGeLU()

    def construct(self, x):
        return self.fast_gelu(x)


class Sigmoid(Cell):
    def __init__(self):
        super().__init__()
        self.sigmoid = math_ops.Sigmoid()

    def construct(self, x):
        return self.sigmoid(x)


class Tanh(Cell):
    def __init__(self):
        super().__init__()
        self.tanh = math_ops.Tanh()

    def construct(self, x):
        return self.tanh(x)


class Softmax(Cell):
    def __init__(self, axis: int = -1):
        super().__init__()
        self.softmax = nn_ops.Softmax(axis)

    def construct(self, x):
        return self.softmax(x)


class LogSoftmax(Cell):
    def __init__(self, axis: int = -1):
        super().__init__()
        self.log_softmax = nn_ops.LogSoftmax(axis)

    def construct(self, x):
        return self.log_softmax(x)


_ACTIVATIONS = {"relu": ReLU, "relu6": ReLU6, "gelu": GELU, "fast_gelu": FastGelu, "sigmoid": Sigmoid, "tanh": Tanh,
                "softmax": Softmax, "logsoftmax": LogSoftmax}


def get_activation(name: str | Cell | None, prim_name: str | None = None) -> Cell | None:
    """MindSpore's ``nn.get_activation(name, prim_name=None)``: a Cell from its lower-case name; ``prim_name`` (the
    asking layer) prefixes the error, as MindSpore's."""
    if name is None or isinstance(name, Cell):
        return name
    cls = _ACTIVATIONS.get(str(name).lower())
    if cls is None:
        who = f"For '{prim_name}', the" if prim_name else "The"
        raise ValueError(f"{who} activation {name!r} is unknown; valid: {', '.join(sorted(_ACTIVATIONS))}")
    return cls()


class Flatten(Cell):
    """``Flatten(start_dim=1, end_dim=-1)``: merge dimensions ``start_dim..end_dim``."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim
        self.flatten = array_ops.Flatten()

    def construct(self, x):
        if self.start_dim == 1 and self.end_dim == -1:
            return self.flatten(x)
        start, end = self.start_dim % x.ndim, self.end_dim % x.ndim
        return jnp.reshape(x, x.shape[:start] + (-1,) + x.shape[end + 1:])


class Dense(Cell):
    """``Dense(in_channels, out_channels, weight_init=None, bias_init=None, has_bias=True, activation=None)``.

    Weight is (out_channels, in_channels) as in MindSpore; defaults are MindSpore 2.x's (``HeUniform(sqrt(5))``
    weight, ``Uniform(1/sqrt(in_channels))`` bias). Inputs of rank > 2 are flattened to 2-D around the matmul.
    Its ops are ``matmul`` and ``bias_add``: ``dense.matmul.shard(...)`` sets a strategy.
    """

    def __init__(self, in_channels: int, out_channels: int, weight_init: Any = None, bias_init: Any = None,
                 has_bias: bool = True, activation: Any = None, dtype: Any = mstype.float32):
        super().__init__()
        self.in_channels, self.out_channels, self.has_bias = in_channels, out_channels, has_bias
        if weight_init is None:
            weight_init = HeUniform(negative_slope=math.sqrt(5))
        if bias_init is None:
            bias_init = Uniform(1.0 / math.sqrt(in_channels)) if in_channels else "zeros"
        self.weight = Parameter(initializer(weight_init, (out_channels, in_channels), dtype), name="weight")
        self.matmul = math_ops.MatMul(transpose_b=True)
        if has_bias:
            self.bias = Parameter(initializer(bias_init, (out_channels,), dtype), name="bias")
            self.bias_add = nn_ops.BiasAdd()
        self.activation = get_activation(activation)

    def construct(self, x):
        lead = x.shape[:-1]
        if x.ndim != 2:
            x = jnp.reshape(x, (-1, x.shape[-1]))
        x = self.matmul(x, self.weight)
        if self.has_bias:
            x = self.bias_add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        if len(lead) != 1:
            x = jnp.reshape(x, lead + (self.out_channels,))
        return x

    def extend_repr(self) -> str:
        return f"input_channels={self.in_channels}, output_channels={self.out_channels}, has_bias={self.has_bias}"


class Dropout(Cell):
    """``Dropout(keep_prob=None, p=None)``: zero elements with probability ``p`` (= 1 - keep_prob, default 0.5)
    in training, identity in evaluation. The key is part of the Cell's state, so runs with the same seed give the
    same masks."""

    def __init__(self, keep_prob: float | None = None, p: float | None = None, dtype: Any = mstype.float32):
        super().__init__()
        if keep_prob is not None and p is not None:
            raise ValueError("Dropout: give keep_prob or p, not both")
        if p is None:
            p = 1.0 - keep_prob if keep_prob is not None else 0.5
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = float(p)
        self.dropout = random_ops.KeyedDropout(keep_prob=1.0 - self.p) if p > 0 else None
        self.rng = RngKey(new_key())

    def construct(self, x):
        if not self.training or self.dropout is None:
            return x
        key, sub = jax.random.split(jax.random.wrap_key_data(self.rng.get_value()))
        self.rng.set_value(jax.random.key_data(key))
        out, _ = self.dropout(x, fold_in_replica(sub))
        return out


class Identity(Cell):
    def construct(self, x):
        return x


