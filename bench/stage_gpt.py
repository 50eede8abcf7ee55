"""A MindSpore-style GPT whose Parameters come from ``initializer`` (so ``no_init_parameters()`` defers them all)
and whose ops carry ``shard()`` hints only when ``mp`` is given (Megatron's column- then row-parallel matmuls over
``mp`` devices): unhinted for AUTO_PARALLEL's searches, hinted to price Megatron's layer. The causal mask is one
numpy array shared by every layer (16 MB at sequence 2,048: one per layer would be 1.6 GB for 96)."""

from __future__ import annotations

import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.common.initializer import Normal, initializer


def _shard(op, strategy, mp):
    return op.shard(strategy) if mp else op


class Dense(nn.Cell):
    def __init__(self, d_in, d_out, mp, split):
        super().__init__()
        self.weight = ms.Parameter(initializer(Normal(0.02), [d_in, d_out], ms.float32), name="weight")
        self.bias = ms.Parameter(initializer("zeros", [d_out], ms.float32), name="bias")
        column = split == "column"
        self.matmul = _shard(ops.MatMul(), ((1, 1), (1, mp)) if column else ((1, mp), (mp, 1)), mp)
        self.add = _shard(ops.Add(), ((1, mp), (mp,)) if column else ((1, 1), (1,)), mp)

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class LayerNorm(nn.Cell):
    def __init__(self, hidden):
        super().__init__()
        self.gamma = ms.Parameter(initializer("ones", [hidden], ms.float32), name="gamma")
        self.beta = ms.Parameter(initializer("zeros", [hidden], ms.float32), name="beta")
        self.norm = ops.LayerNorm(begin_norm_axis=-1, begin_params_axis=-1)

    def construct(self, x):
        return self.norm(x, self.gamma, self.beta)[0]


class Block(nn.Cell):
    def __init__(self, seq, hidden, heads, causal, mp=None):
        super().__init__()
        self.seq, self.heads, self.head_dim = seq, heads, hidden // heads
        self.norm1, self.norm2 = LayerNorm(hidden), LayerNorm(hidden)
        self.query, self.key, self.value = (Dense(hidden, hidden, mp, "column") for _ in range(3))
        self.output = Dense(hidden, hidden, mp, "row")
        self.ffn_in = Dense(hidden, 4 * hidden, mp, "column")
        self.ffn_out = Dense(4 * hidden, hidden, mp, "row")
        self.gelu = _shard(ops.GeLU(), ((1, mp),), mp)
        self.reshape = ops.Reshape()
        self.split_q = _shard(ops.Transpose(), ((1, 1, mp, 1),), mp)
        self.split_k = _shard(ops.Transpose(), ((1, 1, mp, 1),), mp)
        self.split_v = _shard(ops.Transpose(), ((1, 1, mp, 1),), mp)
        self.score = _shard(ops.BatchMatMul(), ((1, mp, 1, 1), (1, mp, 1, 1)), mp)
        self.scale = _shard(ops.Mul(), ((1, mp, 1, 1), ()), mp)
        self.mask = _shard(ops.Add(), ((1, mp, 1, 1), (1, 1, 1, 1)), mp)
        self.softmax = _shard(ops.Softmax(), ((1, mp, 1, 1),), mp)
        self.context = _shard(ops.BatchMatMul(), ((1, mp, 1, 1), (1, mp, 1, 1)), mp)
        self.merge = _shard(ops.Transpose(), ((1, mp, 1, 1),), mp)
        self.add1, self.add2 = ops.Add(), ops.Add()
        self.causal = causal
        self.inv_sqrt = 1.0 / float(np.sqrt(self.head_dim))

    def construct(self, x):
        x = attend(self, x)
        return self.add2(x, self.ffn_out(self.gelu(self.ffn_in(self.norm2(x)))))


def attend(block, x):
    """``x`` plus causal self-attention of its LayerNorm: the first half of a block (this module's and
    ``bench.stage_moe``'s), read from the block's ops."""
    batch = x.shape[0] // block.seq
    heads = (batch, block.seq, block.heads, block.head_dim)
    h = block.norm1(x)
    q = block.split_q(block.reshape(block.query(h), heads), (0, 2, 1, 3))
    k = block.split_k(block.reshape(block.key(h), heads), (0, 2, 3, 1))
    v = block.split_v(block.reshape(block.value(h), heads), (0, 2, 1, 3))
    probs = block.softmax(block.mask(block.scale(block.score(q, k), block.inv_sqrt), ms.Tensor(block.causal)))
    context = block.merge(block.context(probs, v), (0, 2, 1, 3))
    return block.add1(x, block.output(block.reshape(context, (batch * block.seq, block.heads * block.head_dim))))


class GPT(nn.Cell):
    """ids (batch, seq) int32 -> logits (batch * seq, vocab); the head is tied to the embedding."""

    def __init__(self, vocab, seq, hidden, heads, layers, mp=None):
        super().__init__()
        self.seq, self.hidden = seq, hidden
        self.embedding = ms.Parameter(initializer(Normal(0.02), [vocab, hidden], ms.float32), name="embedding")
        self.position = ms.Parameter(initializer(Normal(0.02), [seq, hidden], ms.float32), name="position")
        self.gather = ops.Gather()
        self.add_position = ops.Add()
        self.reshape = ops.Reshape()
        # one numpy mask for every layer, a constant of the traced program (a Tensor attribute shared by several
        # Cells would be state held twice)
        causal = np.triu(np.full((seq, seq), -1e4, np.float32), k=1).reshape(1, 1, seq, seq)
        self.blocks = nn.CellList([Block(seq, hidden, heads, causal, mp) for _ in range(layers)])
        self.norm = LayerNorm(hidden)
        self.logits = ops.MatMul(transpose_b=True)

    def construct(self, ids):
        x = self.add_position(self.gather(self.embedding, ids, 0), self.position)
        x = self.reshape(x, (ids.shape[0] * self.seq, self.hidden))
        for block in self.blocks:
            x = block(x)
        return self.logits(self.norm(x), self.embedding)


GPT3_175B = dict(vocab=51200, seq=2048, hidden=12288, heads=96, layers=96)


def loss_network(vocab, seq, hidden, heads, layers, mp=None):
    """``WithLossCell(GPT(...), sparse softmax cross-entropy)``."""
    net = GPT(vocab, seq, hidden, heads, layers, mp)
    return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
