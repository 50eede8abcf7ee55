"""A small GPT-style network written as a MindSpore user writes one: ops with Megatron ``shard()`` strategies.

Token embedding (Gather) → ``layers`` blocks of multi-head attention (q/k/v projections split over the model
dimension, BatchMatMul per head, Softmax, output projection whose partial sums are reduced) and an MLP (GeLU, the
same column/row split), each with a residual Add → vocabulary projection → softmax cross-entropy. ``dp × mp`` must
be the device count.
"""

from __future__ import annotations

import numpy as np

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops


def _param(rng, shape, name, scale=0.02):
    return Parameter(Tensor((rng.normal(size=shape) * scale).astype(np.float32)), name)


class Block(nn.Cell):
    def __init__(self, d: int, heads: int, seq: int, dp: int, mp: int, seed: int):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.d, self.heads, self.seq = d, heads, seq
        self.wq, self.wk, self.wv = (_param(rng, (d, d), n) for n in ("wq", "wk", "wv"))
        self.wo = _param(rng, (d, d), "wo")
        self.w1, self.w2 = _param(rng, (d, 4 * d), "w1"), _param(rng, (4 * d, d), "w2")
        self.q = ops.MatMul().shard(((dp, 1), (1, mp)))
        self.k = ops.MatMul().shard(((dp, 1), (1, mp)))
        self.v = ops.MatMul().shard(((dp, 1), (1, mp)))
        self.reshape = ops.Reshape()
        self.transpose = ops.Transpose()
        self.scores = ops.BatchMatMul(transpose_b=True).shard(((dp, mp, 1, 1), (dp, mp, 1, 1)))
        self.scale = ops.Mul()
        self.softmax = ops.Softmax().shard(((dp, mp, 1, 1),))
        self.context = ops.BatchMatMul().shard(((dp, mp, 1, 1), (dp, mp, 1, 1)))
        self.out = ops.MatMul().shard(((dp, mp), (mp, 1)))
        self.add1 = ops.Add()
        self.fc1 = ops.MatMul().shard(((dp, 1), (1, mp)))
        self.gelu = ops.GeLU().shard(((dp, mp),))
        self.fc2 = ops.MatMul().shard(((dp, mp), (mp, 1)))
        self.add2 = ops.Add()

    def _heads(self, x, batch):
        x = self.reshape(x, (batch, self.seq, self.heads, self.d // self.heads))
        return self.transpose(x, (0, 2, 1, 3))

    def construct(self, x):  # x: (batch * seq, d)
        batch = x.shape[0] // self.seq
        q, k, v = (self._heads(mm(x, w), batch) for mm, w in ((self.q, self.wq), (self.k, self.wk),
                                                                (self.v, self.wv)))
        p = self.softmax(self.scale(self.scores(q, k), 1.0 / float(np.sqrt(self.d // self.heads))))
        ctx = self.transpose(self.context(p, v), (0, 2, 1, 3))
        x = self.add1(x, self.out(self.reshape(ctx, (batch * self.seq, self.d)), self.wo))
        return self.add2(x, self.fc2(self.gelu(self.fc1(x, self.w1)), self.w2))


class GPT(nn.Cell):
    def __init__(self, vocab: int = 512, d: int = 128, heads: int = 8, layers: int = 4, seq: int = 32,
                 dp: int = 2, mp: int = 4):
        super().__init__()
        rng = np.random.default_rng(0)
        self.seq, self.d = seq, d
        self.embedding = _param(rng, (vocab, d), "embedding")
        self.gather = ops.Gather()
        self.reshape = ops.Reshape()
        self.blocks = nn.CellList([Block(d, heads, seq, dp, mp, i + 1) for i in range(layers)])
        self.head = _param(rng, (d, vocab), "head")
        self.logits = ops.MatMul().shard(((dp, 1), (1, mp)))

    def construct(self, ids):  # ids: (batch, seq) int32 → logits (batch * seq, vocab)
        x = self.gather(self.embedding, self.reshape(ids, (-1,)), 0)
        for block in self.blocks:
            x = block(x)
        return self.logits(x, self.head)


class Flat(nn.Cell):
    """Labels (batch, seq) flattened to match the logits."""

    def __init__(self):
        super().__init__()
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.reshape = ops.Reshape()

    def construct(self, logits, labels):
        return self.loss(logits, self.reshape(labels, (-1,)))


def gpt_train_cell(layers: int = 4, **kw):
    net = GPT(layers=layers, **kw)
    return nn.TrainOneStepCell(nn.WithLossCell(net, Flat()), nn.Momentum(net.trainable_params(), 0.01, 0.9))


def gpt_batch(batch: int = 16, seq: int = 32, vocab: int = 512):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    return ids, np.roll(ids, -1, axis=1)


__all__ = ["GPT", "gpt_train_cell", "gpt_batch", "ms"]
