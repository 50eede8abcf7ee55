"""Propagation passes through split, unstack, scatter-add, top_k, scan, while, cond and custom_vjp bodies: the op after
each keeps the hinted split (no fallback to replicated), and the numbers equal one device's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from graphpar import nn, ops

from .helpers import forward, rand, reference


@jax.custom_vjp
def _clipped_softmax(x):
    return jax.nn.softmax(x, axis=-1)


_clipped_softmax.defvjp(lambda x: (_clipped_softmax(x), x), lambda x, g: (jnp.clip(g, -1, 1),))

BODIES = {
    "split": lambda h: jnp.split(h, 2, axis=1)[0],
    "unstack": lambda h: h * jnp.unstack(h, axis=1)[0][:, None],
    "scatter-add": lambda h: h.at[:, jnp.array([1, 3])].add(1.0),
    "top_k": lambda h: lax.top_k(h, 4)[0],
    "scan": lambda h: lax.scan(lambda c, r: (c * 0.5 + r, None), h, jnp.ones((3,) + h.shape))[0],
    "while": lambda h: lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 1.5), (0, h))[1],
    "cond": lambda h: lax.cond(True, lambda t: t * 2.0, lambda t: t - 1.0, h),
    "custom_vjp": _clipped_softmax,
}


class Through(nn.Cell):
    def __init__(self, body):
        super().__init__()
        self.relu = ops.ReLU().shard(((8, 1),))
        self.body = body
        self.relu2 = ops.ReLU()

    def construct(self, x):
        return self.relu2(self.body(self.relu(x)))


@pytest.mark.parametrize("name", sorted(BODIES))
def test_propagation_passes_through(name):
    x = rand(16, 8)
    out, _, graph = forward(Through(BODIES[name]), x, mode="auto_parallel", search_mode="sharding_propagation",
                            full_batch=True)
    relu2 = graph.find("relu2")[0]
    assert relu2.provenance.kind == "propagated", relu2.provenance
    assert relu2.strategy.in_strategy() == ((8, 1),)
    assert not [n for n in graph.node_list() if n.provenance.kind == "fallback"]
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Through(BODIES[name]), x)), rtol=1e-5,
                               atol=1e-6)
