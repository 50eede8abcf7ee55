"""A MindSpore-style GPT built under ``no_init_parameters()``: parameters born where they live.

Written as a MindSpore 2.x user writes it (imports changed only): ``initializer(...)`` Parameters, ops with
``shard()`` strategies from ``dp`` and ``mp`` (Megatron's column- then row-parallel matmuls), SEMI_AUTO_PARALLEL.
Built inside ``no_init_parameters()``, the network holds no parameter data: each Parameter is its shape, dtype and
initializer. The first step plans the network, then draws every parameter in one jitted program whose outputs lie
in the planned layouts, so each device draws only its own block — with the values an eager build would have.

Run it (8 CPU devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=8``)::

    python examples/gpt_no_init.py                       # a small GPT, three training steps

Plan a 4 x 10^9-parameter GPT for 1,024 devices, with nothing drawn (peak memory well under 2 GB)::

    graphpar plan --devices 1024 -- examples/gpt_no_init.py --hidden 4096 --layers 20 --heads 32 \\
        --vocab 32000 --seq 1024 --dp 128 --mp 8 --batch 8
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.common.initializer import Normal, initializer
from graphpar.nn.utils import no_init_parameters


def _shard(op, strategy, hinted: bool):
    """``op`` with ``strategy`` when ``hinted``, else as it is (the mode's planner chooses its layout)."""
    return op.shard(strategy) if hinted else op


class Dense(nn.Cell):
    """``x @ weight + bias``, ``x`` (tokens, d_in): column parallel (``split="column"``: the output features over
    ``mp``) or row parallel (``"row"``: the input features over ``mp``, one AllReduce); no ``shard()`` when ``mp``
    is None, the batch split 1 way when ``dp`` is None."""

    def __init__(self, d_in: int, d_out: int, dp: int | None, mp: int | None, split: str):
        super().__init__()
        self.weight = ms.Parameter(initializer(Normal(0.02), [d_in, d_out], ms.float32), name="weight")
        self.bias = ms.Parameter(initializer("zeros", [d_out], ms.float32), name="bias")
        dp, hinted = dp or 1, mp is not None
        if split == "column":
            self.matmul = _shard(ops.MatMul(), ((dp, 1), (1, mp)), hinted)
            self.add = _shard(ops.Add(), ((dp, mp), (mp,)), hinted)
        else:
            self.matmul = _shard(ops.MatMul(), ((dp, mp), (mp, 1)), hinted)
            self.add = _shard(ops.Add(), ((dp, 1), (1,)), hinted)

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class LayerNorm(nn.Cell):
    """No ``shard()`` when ``dp`` is None."""

    def __init__(self, hidden: int, dp: int | None):
        super().__init__()
        self.gamma = ms.Parameter(initializer("ones", [hidden], ms.float32), name="gamma")
        self.beta = ms.Parameter(initializer("zeros", [hidden], ms.float32), name="beta")
        self.norm = _shard(ops.LayerNorm(begin_norm_axis=-1, begin_params_axis=-1), ((dp, 1), (1,), (1,)),
                           dp is not None)

    def construct(self, x):
        return self.norm(x, self.gamma, self.beta)[0]


class Attention(nn.Cell):
    """Causal multi-head self-attention; ``causal``: the (1, 1, seq, seq) additive mask, one numpy array every
    layer shares (a constant of the traced program: 16 MB at sequence 2,048, not one per layer)."""

    def __init__(self, seq: int, hidden: int, heads: int, dp: int | None, mp: int | None, causal: np.ndarray):
        super().__init__()
        self.seq, self.heads, self.head_dim = seq, heads, hidden // heads
        self.query = Dense(hidden, hidden, dp, mp, "column")
        self.key = Dense(hidden, hidden, dp, mp, "column")
        self.value = Dense(hidden, hidden, dp, mp, "column")
        self.output = Dense(hidden, hidden, dp, mp, "row")
        self.reshape = ops.Reshape()
        dp, hinted = dp or 1, mp is not None
        self.split_heads = _shard(ops.Transpose(), ((dp, 1, mp, 1),), hinted)
        self.split_heads_k = _shard(ops.Transpose(), ((dp, 1, mp, 1),), hinted)
        self.split_heads_v = _shard(ops.Transpose(), ((dp, 1, mp, 1),), hinted)
        self.score = _shard(ops.BatchMatMul(), ((dp, mp, 1, 1), (dp, mp, 1, 1)), hinted)
        self.scale = _shard(ops.Mul(), ((dp, mp, 1, 1), ()), hinted)
        self.mask = _shard(ops.Add(), ((dp, mp, 1, 1), (1, 1, 1, 1)), hinted)
        self.softmax = _shard(ops.Softmax(), ((dp, mp, 1, 1),), hinted)
        self.context = _shard(ops.BatchMatMul(), ((dp, mp, 1, 1), (dp, mp, 1, 1)), hinted)
        self.merge_heads = _shard(ops.Transpose(), ((dp, mp, 1, 1),), hinted)
        self.causal = causal
        self.inv_sqrt = 1.0 / float(np.sqrt(self.head_dim))

    def construct(self, x):  # x: (batch * seq, hidden)
        batch = x.shape[0] // self.seq
        heads = (batch, self.seq, self.heads, self.head_dim)
        q = self.split_heads(self.reshape(self.query(x), heads), (0, 2, 1, 3))
        k = self.split_heads_k(self.reshape(self.key(x), heads), (0, 2, 3, 1))
        v = self.split_heads_v(self.reshape(self.value(x), heads), (0, 2, 1, 3))
        probs = self.softmax(self.mask(self.scale(self.score(q, k), self.inv_sqrt), ms.Tensor(self.causal)))
        context = self.merge_heads(self.context(probs, v), (0, 2, 1, 3))
        return self.output(self.reshape(context, (batch * self.seq, self.heads * self.head_dim)))


class Block(nn.Cell):
    def __init__(self, seq: int, hidden: int, heads: int, dp: int | None, mp: int | None, causal: np.ndarray):
        super().__init__()
        self.norm1 = LayerNorm(hidden, dp)
        self.attention = Attention(seq, hidden, heads, dp, mp, causal)
        self.norm2 = LayerNorm(hidden, dp)
        self.ffn_in = Dense(hidden, 4 * hidden, dp, mp, "column")
        self.gelu = _shard(ops.GeLU(), (((dp or 1), mp),), mp is not None)
        self.ffn_out = Dense(4 * hidden, hidden, dp, mp, "row")
        self.residual1 = _shard(ops.Add(), ((dp, 1), (dp, 1)), dp is not None)
        self.residual2 = _shard(ops.Add(), ((dp, 1), (dp, 1)), dp is not None)

    def construct(self, x):
        x = self.residual1(x, self.attention(self.norm1(x)))
        return self.residual2(x, self.ffn_out(self.gelu(self.ffn_in(self.norm2(x)))))


def causal_mask(seq: int) -> np.ndarray:
    """The additive causal mask of ``seq`` tokens, (1, 1, seq, seq): -1e4 above the diagonal."""
    return np.triu(np.full((seq, seq), -1e4, np.float32), k=1).reshape(1, 1, seq, seq)


class GPT(nn.Cell):
    """``GPT(...)(ids)``: ids (batch, seq) int32 -> logits (batch * seq, vocab); the output projection is tied to
    the token embedding. ``dp`` and ``mp`` give the ``shard()`` strategies: ``mp`` None, none on the Megatron layer
    (the matmuls, the attention, GeLU); ``dp`` None, none on the ops that only split the batch (embedding,
    LayerNorms, residual adds, logits) and the Megatron layer's batch split 1 way."""

    def __init__(self, vocab: int, seq: int, hidden: int, heads: int, layers: int, dp: int | None = None,
                 mp: int | None = None):
        super().__init__()
        self.seq, self.hidden = seq, hidden
        self.embedding = ms.Parameter(initializer(Normal(0.02), [vocab, hidden], ms.float32), name="embedding")
        self.position = ms.Parameter(initializer(Normal(0.02), [seq, hidden], ms.float32), name="position")
        hinted = dp is not None
        self.gather = _shard(ops.Gather(), ((1, 1), (dp, 1)), hinted)
        self.add_position = _shard(ops.Add(), ((dp, 1, 1), (1, 1)), hinted)
        self.reshape = ops.Reshape()
        causal = causal_mask(seq)
        self.blocks = nn.CellList([Block(seq, hidden, heads, dp, mp, causal) for _ in range(layers)])
        self.norm = LayerNorm(hidden, dp)
        self.logits = _shard(ops.MatMul(transpose_b=True), ((dp, 1), (1, 1)), hinted)

    def construct(self, ids):
        x = self.add_position(self.gather(self.embedding, ids, 0), self.position)
        x = self.reshape(x, (ids.shape[0] * self.seq, self.hidden))
        for block in self.blocks:
            x = block(x)
        return self.logits(self.norm(x), self.embedding)


def parameter_count(net: nn.Cell) -> int:
    return sum(int(np.prod(p.shape)) for p in net.get_parameters())


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("vocab", 128), ("seq", 16), ("hidden", 64), ("heads", 4), ("layers", 2), ("dp", 2),
                          ("mp", 4), ("batch", 8), ("steps", 3)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args(argv)
    ms.set_seed(1)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    with no_init_parameters():
        net = GPT(args.vocab, args.seq, args.hidden, args.heads, args.layers, args.dp, args.mp)
    print(f"GPT: {parameter_count(net):,} parameters, none drawn yet", flush=True)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, size=(args.batch, args.seq + 1)).astype(np.int32)
    ids, labels = tokens[:, :-1], tokens[:, 1:].reshape(-1)
    losses = []
    for step in range(args.steps):
        losses.append(float(train(ids, labels)))
        print(f"step {step + 1}: loss {losses[-1]:.6f}", flush=True)
    return losses


if __name__ == "__main__":
    main(sys.argv[1:])
