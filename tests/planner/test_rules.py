"""Every sharding rule, checked three ways on 8 devices: numerics against one device, per-shard shapes, and the
collectives in the compiled HLO. Inputs are replicated (full_batch) so that the only communication is what the
op's strategy itself needs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from graphpar import Parameter, Tensor, nn, ops

from .helpers import OneOp, collectives, forward, rand, reference, shard_shape, strategies

CASES = [
    # id, cell factory, inputs, hint, expected per-shard output shape, expected collectives
    ("unary", lambda: OneOp(ops.Exp().shard(((2, 4),))), [rand(16, 8)], {}, (8, 2), {}),
    ("binary", lambda: OneOp(ops.Mul().shard(((2, 4), (2, 4)))), [rand(16, 8), rand(16, 8, seed=1)], {}, (8, 2), {}),
    ("broadcast", lambda: OneOp(ops.Add().shard(((8, 1), (1,)))), [rand(16, 8), rand(8, seed=1)], {}, (2, 8), {}),
    ("bias_add", lambda: OneOp(ops.BiasAdd().shard(((2, 4), (4,)))), [rand(16, 8), rand(8, seed=1)], {}, (8, 2),
     {}),
    ("matmul", lambda: OneOp(ops.MatMul().shard(((2, 4), (4, 1)))), [rand(16, 32), rand(32, 8, seed=1)], {},
     (8, 8), {"all-reduce": 1}),
    ("matmul_transpose_b", lambda: OneOp(ops.MatMul(transpose_b=True).shard(((2, 4), (1, 4)))),
     [rand(16, 32), rand(8, 32, seed=1)], {}, (8, 8), {"all-reduce": 1}),
    ("matmul_transpose_a", lambda: OneOp(ops.MatMul(transpose_a=True).shard(((1, 8), (1, 1)))),
     [rand(32, 16), rand(32, 8, seed=1)], {}, (2, 8), {}),
    ("batch_matmul", lambda: OneOp(ops.BatchMatMul().shard(((2, 2, 2), (2, 2, 1)))),
     [rand(4, 8, 16), rand(4, 16, 8, seed=1)], {}, (2, 4, 8), {"all-reduce": 1}),
    ("reduce_sum_keep_dims", lambda: OneOp(ops.ReduceSum(keep_dims=True).shard(((2, 4),)), 1), [rand(16, 8)], {},
     (8, 1), {"all-reduce": 1}),
    ("reduce_mean_batch", lambda: OneOp(ops.ReduceMean().shard(((8, 1),)), 1), [rand(16, 8)], {}, (2,), {}),
    ("reduce_max", lambda: OneOp(ops.ReduceMax().shard(((2, 4),)), -1), [rand(16, 8)], {}, (8,), {"all-reduce": 1}),
    ("softmax", lambda: OneOp(ops.Softmax().shard(((8, 1),))), [rand(16, 8)], {}, (2, 8), {}),
    ("log_softmax", lambda: OneOp(ops.LogSoftmax(axis=0).shard(((1, 8),))), [rand(16, 8)], {}, (16, 1), {}),
    # MindSpore ignores a strategy on Reshape: the replicated input (full_batch) stays replicated
    ("reshape", lambda: OneOp(ops.Reshape().shard(((8, 1, 1),)), (16, 16)), [rand(16, 4, 4)], {}, (16, 16), {}),
    ("transpose", lambda: OneOp(ops.Transpose().shard(((2, 4),)), (1, 0)), [rand(16, 8)], {}, (2, 8), {}),
    ("concat", lambda: ConcatCell(ops.Concat(axis=1).shard(((8, 1), (8, 1)))), [rand(16, 4), rand(16, 4, seed=1)],
     {}, (2, 8), {}),
    ("strided_slice", lambda: OneOp(ops.StridedSlice().shard(((8, 1),)), (0, 2), (16, 6), (1, 1)),
     [rand(16, 8)], {}, (2, 4), {}),
    ("one_hot", lambda: OneHotCell(ops.OneHot().shard(((8,), (), ()))), [np.arange(16, dtype=np.int32) % 5], {},
     (2, 5), {}),
    ("gather_embedding_dim", lambda: OneOp(ops.Gather().shard(((1, 8), (1,))), 0),
     [rand(20, 16), np.arange(12, dtype=np.int32) % 20], {}, (12, 2), {}),
    ("gather_indices", lambda: OneOp(ops.Gather().shard(((1, 1), (8,))), 0),
     [rand(20, 16), np.arange(16, dtype=np.int32) % 20], {}, (2, 16), {}),
    ("conv2d_batch", lambda: OneOp(ops.Conv2D(8, 3, pad_mode="same").shard(((8, 1, 1, 1), (1, 1, 1, 1)))),
     [rand(8, 4, 6, 6), rand(8, 4, 3, 3, seed=1)], {}, (1, 8, 6, 6), {}),
    ("conv2d_out_channel", lambda: OneOp(ops.Conv2D(8, 3, pad_mode="valid").shard(((1, 1, 1, 1), (8, 1, 1, 1)))),
     [rand(2, 4, 6, 6), rand(8, 4, 3, 3, seed=1)], {}, (2, 1, 4, 4), {}),
    ("conv2d_in_channel", lambda: OneOp(ops.Conv2D(8, 1).shard(((2, 4, 1, 1), (1, 4, 1, 1)))),
     [rand(4, 8, 5, 5), rand(8, 8, 1, 1, seed=1)], {}, (2, 8, 5, 5), {"all-reduce": 1}),
    ("max_pool", lambda: OneOp(ops.MaxPool(2, 2).shard(((4, 2, 1, 1),))), [rand(8, 4, 6, 6)], {}, (2, 2, 3, 3), {}),
    ("avg_pool", lambda: OneOp(ops.AvgPool(3, 1, "same").shard(((8, 1, 1, 1),))), [rand(8, 4, 6, 6)], {},
     (1, 4, 6, 6), {}),
    ("cast", lambda: OneOp(ops.Cast().shard(((2, 4),)), jnp.float16), [rand(16, 8)], {}, (8, 2), {}),
    ("select", lambda: OneOp(ops.Select().shard(((8, 1), (8, 1), (8, 1)))),
     [rand(16, 8) > 0, rand(16, 8), rand(16, 8, seed=1)], {}, (2, 8), {}),
]


class ConcatCell(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.concat = op

    def construct(self, a, b):
        return self.concat((a, b))


class OneHotCell(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.one_hot = op

    def construct(self, idx):
        return self.one_hot(idx, 5, jnp.asarray(1.0), jnp.asarray(0.0))


@pytest.mark.parametrize("name,make,inputs,ctx,local,expected", CASES, ids=[c[0] for c in CASES])
def test_rule(name, make, inputs, ctx, local, expected):
    out, hlo, graph = forward(make(), *inputs, full_batch=True, **ctx)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(reference(make(), *inputs), np.float32),
                               rtol=1e-5, atol=1e-5)
    assert shard_shape(out) == local
    assert collectives(hlo) == expected


def test_batch_norm_training_statistics_are_global():
    class BN(nn.Cell):
        def __init__(self):
            super().__init__()
            self.bn = ops.BatchNorm(is_training=True).shard(((8, 1, 1, 1), (1,), (1,), (1,), (1,)))
            self.scale = Parameter(Tensor(np.ones(4, np.float32)), "scale")
            self.shift = Parameter(Tensor(np.zeros(4, np.float32)), "shift")

        def construct(self, x):
            y, mean, var = self.bn(x, self.scale, self.shift, jnp.zeros(4), jnp.ones(4))
            return y

    x = rand(16, 4, 3, 3)
    out, hlo, _ = forward(BN(), x, full_batch=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(BN(), x)), rtol=1e-4, atol=1e-5)
    assert shard_shape(out) == (2, 4, 3, 3)
    assert collectives(hlo).get("all-reduce", 0) >= 1  # batch statistics are reduced over the split batch


class RawOps(nn.Cell):
    """jnp/lax calls written directly in construct become graph nodes and are planned by propagation."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(rand(8, 16) * 0.1), "w")
        self.relu = ops.ReLU().shard(((2, 4),))

    def construct(self, x):
        h = self.relu(x)
        h = jnp.dot(h, self.w)                       # dot_general
        h = jnp.broadcast_to(h[:, None, :], (16, 2, 16)).reshape(16, 32)  # broadcast_in_dim, reshape
        h = jnp.concatenate([h, jnp.tanh(h)], axis=1)  # concatenate, tanh
        return jnp.transpose(h[:, 2:10])              # slice, transpose


def test_raw_jnp_calls_are_planned():
    x = rand(16, 8)
    out, hlo, graph = forward(RawOps(), x, mode="auto_parallel", search_mode="sharding_propagation",
                              full_batch=True)
    kinds = {n.kind for n in graph.node_list()}
    assert {"dot_general", "broadcast_in_dim", "reshape", "concatenate", "tanh", "slice", "transpose"} <= kinds
    assert all(n.provenance.kind in ("user", "propagated") for n in graph.node_list() if n.kind != "squeeze")
    dot = next(n for n in graph.node_list() if n.kind == "dot_general")
    assert dot.strategy.in_strategy() == ((2, 4), (4, 1))
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(RawOps(), x)), rtol=1e-5, atol=1e-6)


def test_primitive_without_a_rule_falls_back_to_replicated_and_says_so(caplog):
    import logging

    from graphpar import _logging

    class Sorts(nn.Cell):
        def __init__(self):
            super().__init__()
            self.relu = ops.ReLU().shard(((8, 1),))

        def construct(self, x):
            return jnp.real(jnp.fft.fft(self.relu(x), axis=-1))

    logging.getLogger("graphpar").propagate = True
    _logging._said.clear()
    with caplog.at_level(logging.WARNING, logger="graphpar"):
        out, _, graph = forward(Sorts(), rand(16, 8), full_batch=True)
    node = next(n for n in graph.node_list() if n.kind == "fft")
    assert node.provenance.kind == "fallback" and "fft" in node.provenance.detail
    assert any("fft" in r.message and "replicated" in r.message for r in caplog.records)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Sorts(), rand(16, 8))), rtol=1e-6)
