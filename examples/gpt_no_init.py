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


class Dense(nn.Cell):
    """``x @ weight + bias``, ``x`` (tokens, d_in): column parallel (``split="column"``: the output features over
    ``mp``) or row parallel (``"row"``: the input features over ``mp``, one AllReduce)."""

    def __init__(self, d_in: int, d_out: int, dp: int, mp: int, split: str):
        super().__init__()
        self.weight = ms.Parameter(initializer(Normal(0.02), [d_in, d_out], ms.float32), name="weight")
        self.bias = ms.Parameter(initializer("zeros", [d_out], ms.float32), name="bias")
        if split == "column":
            self.matmul = ops.MatMul().shard(((dp, 1), (1, mp)))
            self.add = ops.Add().shard(((dp, mp), (mp,)))
        else:
            self.matmul = ops.MatMul().shard(((dp, mp), (mp, 1)))
            self.add = ops.Add().shard(((dp, 1), (1,)))

    def construct(self, x):
        return self.add(self.matmul(x, self.weight), self.bias)


class LayerNorm(nn.Cell):
    def __init__(self, hidden: int, dp: int):
        super().__init__()
        self.gamma = ms.Parameter(initializer("ones", [hidden], ms.float32), name="gamma")
        self.beta = ms.Parameter(initializer("zeros", [hidden], ms.float32), name="beta")
        self.norm = ops.LayerNorm(begin_norm_axis=-1, begin_params_axis=-1).shard(((dp, 1), (1,), (1,)))

    def construct(self, x):
        return self.norm(x, self.gamma, self.beta)[0]


class Attention(nn.Cell):
    def __init__(self, seq: int, hidden: int, heads: int, dp: int, mp: int):
        super().__init__()
        self.seq, self.heads, self.head_dim = seq, heads, hidden // heads
        self.query = Dense(hidden, hidden, dp, mp, "column")
        self.key = Dense(hidden, hidden, dp, mp, "column")
        self.value = Dense(hidden, hidden, dp, mp, "column")
        self.output = Dense(hidden, hidden, dp, mp, "row")
        self.reshape = ops.Reshape()
        self.split_heads = ops.Transpose().shard(((dp, 1, mp, 1),))
        self.split_heads_k = ops.Transpose().shard(((dp, 1, mp, 1),))
        self.split_heads_v = ops.Transpose().shard(((dp, 1, mp, 1),))
        self.score = ops.BatchMatMul().shard(((dp, mp, 1, 1), (dp, mp, 1, 1)))
        self.scale = ops.Mul().shard(((dp, mp, 1, 1), ()))
        self.mask = ops.Add().shard(((dp, mp, 1, 1), (1, 1, 1, 1)))
        self.softmax = ops.Softmax().shard(((dp, mp, 1, 1),))
        self.context = ops.BatchMatMul().shard(((dp, mp, 1, 1), (dp, mp, 1, 1)))
        self.merge_heads = ops.Transpose().shard(((dp, mp, 1, 1),))
        self.causal = ms.Tensor(np.triu(np.full((seq, seq), -1e4, np.float32), k=1).reshape(1, 1, seq, seq))
        self.inv_sqrt = 1.0 / float(np.sqrt(self.head_dim))

    def construct(self, x):  # x: (batch * seq, hidden)
        batch = x.shape[0] // self.seq
        heads = (batch, self.seq, self.heads, self.head_dim)
        q = self.split_heads(self.reshape(self.query(x), heads), (0, 2, 1, 3))
        k = self.split_heads_k(self.reshape(self.key(x), heads), (0, 2, 3, 1))
        v = self.split_heads_v(self.reshape(self.value(x), heads), (0, 2, 1, 3))
        probs = self.softmax(self.mask(self.scale(self.score(q, k), self.inv_sqrt), self.causal))
        context = self.merge_heads(self.context(probs, v), (0, 2, 1, 3))
        return self.output(self.reshape(context, (batch * self.seq, self.heads * self.head_dim)))


class Block(nn.Cell):
    def __init__(self, seq: int, hidden: int, heads: int, dp: int, mp: int):
        super().__init__()
        self.norm1 = LayerNorm(hidden, dp)
        self.attention = Attention(seq, hidden, heads, dp, mp)
        self.norm2 = LayerNorm(hidden, dp)
        self.ffn_in = Dense(hidden, 4 * hidden, dp, mp, "column")
        self.gelu = ops.GeLU().shard(((dp, mp),))
        self.ffn_out = Dense(4 * hidden, hidden, dp, mp, "row")
        self.residual1 = ops.Add().shard(((dp, 1), (dp, 1)))
        self.residual2 = ops.Add().shard(((dp, 1), (dp, 1)))

    def construct(self, x):
        x = self.residual1(x, self.attention(self.norm1(x)))
        return self.residual2(x, self.ffn_out(self.gelu(self.ffn_in(self.norm2(x)))))


class GPT(nn.Cell):
    """``GPT(...)(ids)``: ids (batch, seq) int32 -> logits (batch * seq, vocab); the output projection is tied to
    the token embedding."""

    def __init__(self, vocab: int, seq: int, hidden: int, heads: int, layers: int, dp: int, mp: int):
        super().__init__()
        self.seq, self.hidden = seq, hidden
        self.embedding = ms.Parameter(initializer(Normal(0.02), [vocab, hidden], ms.float32), name="embedding")
        self.position = ms.Parameter(initializer(Normal(0.02), [seq, hidden], ms.float32), name="position")
        self.gather = ops.Gather().shard(((1, 1), (dp, 1)))
        self.add_position = ops.Add().shard(((dp, 1, 1), (1, 1)))
        self.reshape = ops.Reshape()
        self.blocks = nn.CellList([Block(seq, hidden, heads, dp, mp) for _ in range(layers)])
        self.norm = LayerNorm(hidden, dp)
        self.logits = ops.MatMul(transpose_b=True).shard(((dp, 1), (1, 1)))

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
