"""MindSpore 2.x's generated ``Ext`` ops (``mindspore.ops.auto_generate.gen_ops_def``) that its parallel tests
shard: ``AddExt``/``SubExt`` (``input +/- alpha * other``) and ``AddcmulExt`` (``input + value * tensor1 *
tensor2``). Their tensor inputs broadcast as ``Add``'s, so the planner reads them with the elementwise rule; the
scalar ``alpha``/``value`` is a constant and takes no strategy entry."""

from __future__ import annotations

import jax.numpy as jnp

from graphpar.ops.primitive import Primitive


class AddExt(Primitive):
    """``AddExt()(input, other, alpha=1)``: ``input + alpha * other``."""

    input_names = ("input", "other")

    def compute(self, x, other, alpha=1):
        return jnp.add(x, other if alpha == 1 else jnp.multiply(alpha, other))


class SubExt(Primitive):
    """``SubExt()(input, other, alpha=1)``: ``input - alpha * other``."""

    input_names = ("input", "other")

    def compute(self, x, other, alpha=1):
        return jnp.subtract(x, other if alpha == 1 else jnp.multiply(alpha, other))


class AddcmulExt(Primitive):
    """``AddcmulExt()(input, tensor1, tensor2, value=1)``: ``input + value * tensor1 * tensor2``."""

    input_names = ("input", "tensor1", "tensor2")

    def compute(self, x, tensor1, tensor2, value=1):
        return jnp.add(x, jnp.multiply(value, jnp.multiply(tensor1, tensor2)))


def add_ext(input, other, alpha=1):  # noqa: A002 (MindSpore's argument name)
    return AddExt()(input, other, alpha)


def sub_ext(input, other, alpha=1):  # noqa: A002
    return SubExt()(input, other, alpha)


# MindSpore's module-level op instance: ``addcmul_ext_op.shard(...)`` shards this one instance, as in MindSpore
addcmul_ext_op = AddcmulExt()
