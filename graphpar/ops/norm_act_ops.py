"""Normalisation, activation and loss primitives added for MindSpore parity: ``RmsNorm``, ``PReLU``, ``Lerp``,
``L2Loss``, ``SigmoidCrossEntropyWithLogits``, ``Swiglu``. Sharding rules: ``graphpar.planner.rules.norm_act_rules``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from graphpar.ops.primitive import Primitive


class RmsNorm(Primitive):
    """``RmsNorm(epsilon=1e-6)(x, gamma)`` → ``(y, rstd)``: ``rstd = 1 / sqrt(mean(x**2) + epsilon)`` over the
    trailing ``gamma.ndim`` dimensions of ``x`` (kept as size-1 dimensions, float32), ``y = x * rstd * gamma``."""

    input_names = ("x", "gamma")

    def __init__(self, epsilon: float = 1e-6):
        if not 0 < float(epsilon) <= 1:
            raise ValueError(f"RmsNorm(epsilon): epsilon must be in (0, 1], got {epsilon!r}")
        super().__init__(epsilon=float(epsilon))

    def compute(self, x, gamma):
        begin = jnp.ndim(x) - jnp.ndim(gamma)
        if begin < 0 or jnp.shape(x)[begin:] != jnp.shape(gamma):
            raise ValueError(f"RmsNorm '{self.instance_name}': gamma's shape {jnp.shape(gamma)} must equal the "
                             f"trailing dimensions of x's shape {jnp.shape(x)}")
        axes = tuple(range(begin, jnp.ndim(x)))
        x32 = jnp.asarray(x, jnp.float32)
        rstd = lax.rsqrt(jnp.mean(jnp.square(x32), axis=axes, keepdims=True) + self.attrs["epsilon"])
        y = (x32 * rstd).astype(jnp.result_type(x)) * gamma
        return y.astype(jnp.result_type(x)), rstd


class PReLU(Primitive):
    """``PReLU()(x, weight)``: ``x`` where positive, else ``weight * x``; ``weight`` is 1-D with one slope per
    channel (dimension 1 of ``x``, or dimension 0 of a 1-D ``x``) or a single shared slope."""

    input_names = ("x", "weight")

    def compute(self, x, weight):
        weight = jnp.asarray(weight)
        channels = jnp.shape(x)[1] if jnp.ndim(x) > 1 else jnp.shape(x)[0]
        if weight.ndim != 1 or weight.shape[0] not in (1, channels):
            raise ValueError(f"PReLU '{self.instance_name}': weight must be 1-D of size 1 or {channels} (x's "
                             f"channels), got shape {weight.shape}")
        if jnp.ndim(x) > 1:
            weight = jnp.reshape(weight, (-1,) + (1,) * (jnp.ndim(x) - 2))
        return jnp.where(x > 0, x, weight.astype(jnp.result_type(x)) * x)


class Lerp(Primitive):
    """``Lerp()(start, end, weight)``: ``start + weight * (end - start)``, broadcast as numpy does; ``weight`` is a
    tensor or a float (a float has ``()`` or no entry in the strategy)."""

    input_names = ("start", "end", "weight")
    optional_inputs = 1

    def compute(self, start, end, weight):
        if not isinstance(weight, (jax.Array, jax.core.Tracer)) and jnp.ndim(weight) == 0:
            weight = jnp.asarray(weight, jnp.result_type(start))
        return start + weight * (end - start)


class L2Loss(Primitive):
    """``L2Loss()(x)``: ``sum(x ** 2) / 2``, a 0-d tensor of ``x``'s dtype."""

    def compute(self, x):
        return (jnp.sum(jnp.square(x)) / 2).astype(jnp.result_type(x))


class SigmoidCrossEntropyWithLogits(Primitive):
    """``SigmoidCrossEntropyWithLogits()(logits, label)``: the elementwise binary cross entropy of
    ``sigmoid(logits)`` against ``label``, in the numerically stable form ``max(x, 0) - x * y + log(1 + e^-|x|)``."""

    input_names = ("logits", "label")

    def compute(self, logits, label):
        return jnp.maximum(logits, 0) - logits * label + jnp.log1p(jnp.exp(-jnp.abs(logits)))


class Swiglu(Primitive):
    """``Swiglu()(input, dim=-1)`` (MindSpore's generated ``gen_ops_prim.Swiglu``): ``input`` cut in two halves
    ``a``, ``b`` along ``dim``, the output ``swish(a) * b`` (``a * sigmoid(a) * b``), half as long along ``dim``."""

    input_names = ("input",)

    def compute(self, x, dim=-1):
        rank = jnp.ndim(x)
        if not isinstance(dim, int) or not -rank <= dim < rank:
            raise ValueError(f"Swiglu '{self.instance_name}': dim must be an int in [{-rank}, {rank - 1}] (the "
                             f"input has rank {rank}), got {dim!r}")
        size = jnp.shape(x)[dim]
        if isinstance(size, int) and size % 2:  # a dynamic (symbolic) size is cut at its floor half, as MindSpore
            raise ValueError(f"Swiglu '{self.instance_name}': the input's dimension {dim} (size {size}) must have "
                             "an even size, cut into two halves")
        half = size // 2
        a = lax.slice_in_dim(x, 0, half, axis=dim % rank)
        b = lax.slice_in_dim(x, half, 2 * half, axis=dim % rank)
        return jax.nn.silu(a) * b
