"""Networks the pipeline tests train: a 4-layer MLP (graphpar.models.mlp.DenseStack) and a small GPT-style model,
with MindSpore-style stages."""

import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.models.mlp import DenseStack


def _w(rng, shape, scale=0.3):
    return ms.Tensor(rng.normal(0, scale, shape).astype(np.float32))


def mlp4(d=16, hidden=32, d_out=8, stages=2, seed=0, strategies=False) -> DenseStack:
    """Four Dense layers (ReLU between); consecutive layers on consecutive stages. ``strategies``: tensor parallel
    inside each stage, columns then rows of each stage's pair of layers."""
    rng = np.random.default_rng(seed)
    dims = [d, hidden, hidden, hidden, d_out]
    weights = [rng.normal(0, 0.3, (dims[i + 1], dims[i])).astype(np.float32) for i in range(4)]
    matmul = [((2, 1), (2, 1)) if i % 2 == 0 else ((2, 2), (1, 2)) for i in range(4)] if strategies else None
    return DenseStack(weights, stages=stages, matmul_strategies=matmul)


class LayerNorm(nn.Cell):
    def __init__(self, d):
        super().__init__()
        self.gamma = ms.Parameter(ms.Tensor(np.ones(d, np.float32)), name="gamma")
        self.beta = ms.Parameter(ms.Tensor(np.zeros(d, np.float32)), name="beta")
        self.mean = ops.ReduceMean(keep_dims=True)
        self.sub = ops.Sub()
        self.mul = ops.Mul()
        self.add = ops.Add()
        self.rsqrt = ops.Rsqrt()
        self.square = ops.Square()

    def construct(self, x):
        mu = self.mean(x, -1)
        xc = self.sub(x, mu)
        var = self.mean(self.square(xc), -1)
        return self.add(self.mul(self.mul(xc, self.rsqrt(var + 1e-5)), self.gamma), self.beta)


class Block(nn.Cell):
    """Pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, d, heads, rng):
        super().__init__()
        self.d, self.heads = d, heads
        self.ln1, self.ln2 = LayerNorm(d), LayerNorm(d)
        self.qkv = nn.Dense(d, 3 * d, weight_init=_w(rng, (3 * d, d), 0.1), bias_init="zeros")
        self.proj = nn.Dense(d, d, weight_init=_w(rng, (d, d), 0.1), bias_init="zeros")
        self.fc = nn.Dense(d, 4 * d, weight_init=_w(rng, (4 * d, d), 0.1), bias_init="zeros", activation="gelu")
        self.out = nn.Dense(4 * d, d, weight_init=_w(rng, (d, 4 * d), 0.1), bias_init="zeros")
        self.reshape = ops.Reshape()
        self.transpose = ops.Transpose()
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.context = ops.BatchMatMul()
        self.softmax = ops.Softmax()
        self.add = ops.Add()

    def construct(self, x):
        b, t, d = x.shape
        h = self.reshape(self.ln1(x), (b * t, d))
        qkv = self.reshape(self.qkv(h), (b, t, 3, self.heads, d // self.heads))
        qkv = self.transpose(qkv, (2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]
        mask = np.triu(np.full((t, t), -1e9, np.float32), 1)
        att = self.softmax(self.scores(q, k) * (1.0 / np.sqrt(d // self.heads)) + mask)
        ctx = self.transpose(self.context(att, v), (0, 2, 1, 3))
        x = self.add(x, self.reshape(self.proj(self.reshape(ctx, (b * t, d))), (b, t, d)))
        h = self.out(self.fc(self.reshape(self.ln2(x), (b * t, d))))
        return self.add(x, self.reshape(h, (b, t, d)))


class GPT(nn.Cell):
    """Token + position embedding, ``layers`` blocks, final norm and a vocabulary head."""

    def __init__(self, vocab=32, seq=8, d=16, heads=2, layers=4, stages=2, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.wte = ms.Parameter(_w(rng, (vocab, d), 0.2), name="wte")
        self.wpe = ms.Parameter(_w(rng, (seq, d), 0.2), name="wpe")
        self.gather = ops.Gather()
        self.add = ops.Add()
        self.blocks = nn.CellList([Block(d, heads, rng) for _ in range(layers)])
        self.ln_f = LayerNorm(d)
        self.head = nn.Dense(d, vocab, weight_init=_w(rng, (vocab, d), 0.1), has_bias=False)
        self.reshape = ops.Reshape()
        # the embedding (ops of this Cell's own construct) follows its consumers into stage 0; the final reshape its
        # producer into the last stage
        for i, block in enumerate(self.blocks):
            block.pipeline_stage = i * stages // layers
        self.ln_f.pipeline_stage = self.head.pipeline_stage = stages - 1

    def construct(self, tokens):
        b, t = tokens.shape
        x = self.add(self.gather(self.wte, tokens, 0), self.wpe)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.reshape(self.ln_f(x), (b * t, x.shape[-1])))
        return self.reshape(logits, (b, t, -1))


class TokenLoss(nn.Cell):
    """Mean cross-entropy of next-token logits against integer targets."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.reshape = ops.Reshape()

    def construct(self, logits, targets):
        return self.loss(self.reshape(logits, (-1, self.vocab)), self.reshape(targets, (-1,)))


def mlp_virtual(layers=8, stages=4, segments=2, v_shape=False, d=16, hidden=32, d_out=8, seed=0) -> DenseStack:
    """``layers`` Dense layers (ReLU between) cut into ``stages * segments`` virtual stages in model order, set as a
    MindSpore user sets them with ``pipeline_interleave``: ``pipeline_stage`` and ``pipeline_segment`` per layer.
    Interleaved 1F1B (MindSpore's docs: "stage 0 has layers 0 and 4"): virtual stage ``c`` is segment
    ``c // stages`` of stage ``c % stages``. ``v_shape`` (zero_bubble_v: "stage 0 has layer 0 and 7"): segment 1
    runs back from the last stage to stage 0. ``segments=1`` sets no ``pipeline_segment``."""
    rng = np.random.default_rng(seed)
    dims = [d] + [hidden] * (layers - 1) + [d_out]
    net = DenseStack([rng.normal(0, 0.3, (dims[i + 1], dims[i])).astype(np.float32) for i in range(layers)])
    for i, layer in enumerate(net.layers):
        chunk = i * stages * segments // layers
        segment, stage = divmod(chunk, stages)
        layer.pipeline_stage = stages - 1 - stage if v_shape and segment % 2 else stage
        if segments > 1:
            layer.pipeline_segment = segment
    return net


class TiedHead(nn.Cell):
    """The last stage of :class:`TiedMLP`: a Dense layer on ``h + h @ tied.T``, ``tied`` being the first stage's
    weight (a Parameter shared by two stages, as an output projection tied to the embedding)."""

    def __init__(self, tied, rng):
        super().__init__()
        self.dense = nn.Dense(16, 8, weight_init=_w(rng, (8, 16)), bias_init="zeros")
        self.tied = tied
        self.mm = ops.MatMul(transpose_b=True)

    def construct(self, h):
        return self.dense(h + self.mm(h, self.tied))


class TiedMLP(nn.Cell):
    """Two stages sharing the first Dense layer's weight."""

    def __init__(self, stages=2, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.a = nn.Dense(16, 16, weight_init=_w(rng, (16, 16)), bias_init="zeros", activation="relu")
        self.b = TiedHead(self.a.weight, rng)
        self.a.pipeline_stage, self.b.pipeline_stage = 0, stages - 1

    def construct(self, x):
        return self.b(self.a(x))


class TiedVMLP(nn.Cell):
    """:class:`TiedMLP` with two middle layers, laid out for zero_bubble_v on 2 stages: the first layer (stage 0,
    segment 0) and the head reading its weight again (stage 0, segment 1, the V's last virtual stage) on the same
    devices, the middle layers on stage 1."""

    def __init__(self, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.a = nn.Dense(16, 16, weight_init=_w(rng, (16, 16)), bias_init="zeros", activation="relu")
        self.m1 = nn.Dense(16, 16, weight_init=_w(rng, (16, 16)), bias_init="zeros", activation="relu")
        self.m2 = nn.Dense(16, 16, weight_init=_w(rng, (16, 16)), bias_init="zeros", activation="relu")
        self.b = TiedHead(self.a.weight, rng)
        for cell, stage, segment in ((self.a, 0, 0), (self.m1, 1, 0), (self.m2, 1, 1), (self.b, 0, 1)):
            cell.pipeline_stage, cell.pipeline_segment = stage, segment

    def construct(self, x):
        return self.b(self.m2(self.m1(self.a(x))))
