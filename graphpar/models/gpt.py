"""A GPT-style model written the way MindSpore's parallel transformer writes it (mindspore.parallel._transformer /
mindformers): activations kept 2-D ``(batch * seq, hidden)``; ``Linear`` = ``MatMul(transpose_b=True)`` + ``Add``
bias; ``Reshape`` + ``Transpose`` into heads; ``BatchMatMul``; ``Mul`` by a Python-scalar scale; ``Add`` of a
mask; ``Softmax``; ``LayerNorm``; ``GeLU``; ``Gather`` embeddings; the output projection tied to the vocabulary
embedding.

``GPT(dp, mp, hints=...)`` is the model the planner, search and planning-benchmark code trains; it is also a
reasonable starting point for a user's own MindSpore-style transformer.

Strategies are Megatron's, as the MindSpore transformer sets them from ``dp`` and ``mp``. ``hints`` picks which
roles get their ``shard()`` (``ALL``: every op but the Reshapes, which MindSpore ignores; ``QKV_FFN1``: the Q/K/V
and first feed-forward matmuls; ``QKV``: the Q/K/V matmuls only); the rest is left to the mode's planner
(``NONE``: no hints at all, for AUTO_PARALLEL's searches).

``GPT(..., moe_config=MoEConfig(expert_num=8, ...), expert_parallel=4)`` replaces every block's feed-forward by
MindSpore's Mixture of Experts layer (``graphpar.nn.transformer.MoE``, parallel config ``MoEParallelConfig(dp, mp,
expert_parallel)``); the model then returns ``(logits, aux_loss)``, the blocks' load-balancing losses summed, as
MindSpore's MoE transformer does, and ``gpt_train_cell`` adds ``aux_loss`` to the cross-entropy.

Sequence and context parallel are options, as MindFormers' parallel config names them: ``use_seq_parallel``
(Megatron's: the LayerNorm/residual regions split over the model-parallel devices too), ``context_parallel`` with
``context_parallel_algo`` (``"colossalai_cp"``: ring attention, ``"ulysses_cp"``: all-to-all to head-split) and
``use_flash_attention`` (attention as one ``FlashAttentionScore``); the strategies they give are in
``graphpar.models.gpt_parallel``.
"""

from __future__ import annotations

import numpy as np

from graphpar import nn, ops
from graphpar.common.parameter import Parameter
from graphpar.common.tensor import Tensor
from graphpar.errors import ConfigError
from graphpar.models.gpt_parallel import GPTParallel
from graphpar.nn.transformer import MoE, MoEConfig, MoEParallelConfig

ALL = frozenset({"embed", "ln", "qkv", "qkv_bias", "heads", "attn", "proj", "proj_bias", "residual", "ffn1",
                 "ffn1_bias", "gelu", "ffn2", "ffn2_bias", "logits"})
QKV_FFN1 = frozenset({"qkv", "ffn1"})
QKV = frozenset({"qkv"})
NONE = frozenset()


def _rand(shape, seed, scale=0.05):
    return Tensor((np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32))


class _Sharder:
    """Calls ``op.shard(strategy)`` only for the roles in ``hints``."""

    def __init__(self, hints: frozenset):
        self.hints = hints

    def __call__(self, op, role: str, strategy, out_strategy=None):
        return op.shard(strategy, out_strategy) if role in self.hints else op


class Linear(nn.Cell):
    """MindSpore transformer's Linear: weight (out, in), ``MatMul(transpose_b=True)`` then ``Add`` of the bias."""

    def __init__(self, d_in, d_out, seed, shard, role, matmul_strategy, bias_strategy, out_strategy=None):
        super().__init__()
        self.weight = Parameter(_rand((d_out, d_in), seed), "weight")
        self.bias = Parameter(Tensor(np.zeros(d_out, np.float32)), "bias")
        self.matmul = shard(ops.MatMul(transpose_b=True), role, matmul_strategy, out_strategy)
        self.bias_add = shard(ops.Add(), role + "_bias", bias_strategy)

    def construct(self, x):
        return self.bias_add(self.matmul(x, self.weight), self.bias)


class LayerNorm(nn.Cell):
    def __init__(self, hidden, shard, dp, par: GPTParallel | None = None):
        super().__init__()
        par = par or GPTParallel(dp, 1)
        self.gamma = Parameter(Tensor(np.ones(hidden, np.float32)), "gamma")
        self.beta = Parameter(Tensor(np.zeros(hidden, np.float32)), "beta")
        self.layer_norm = shard(ops.LayerNorm(begin_norm_axis=-1, begin_params_axis=-1, epsilon=1e-5), "ln", par.norm())

    def construct(self, x):
        return self.layer_norm(x, self.gamma, self.beta)[0]


class Attention(nn.Cell):
    def __init__(self, seq, hidden, heads, dp, mp, seed, shard, par: GPTParallel | None = None):
        super().__init__()
        par = par or GPTParallel(dp, mp)
        self.seq, self.heads, self.head_dim = seq, heads, hidden // heads
        col, col_bias = par.column()
        self.dense_q = Linear(hidden, hidden, seed, shard, "qkv", col, col_bias)
        self.dense_k = Linear(hidden, hidden, seed + 1, shard, "qkv", col, col_bias)
        self.dense_v = Linear(hidden, hidden, seed + 2, shard, "qkv", col, col_bias)
        self.reshape = ops.Reshape()
        self.transpose = shard(ops.Transpose(), "heads", par.heads())
        self.transpose_k = shard(ops.Transpose(), "heads", par.heads())
        self.transpose_v = shard(ops.Transpose(), "heads", par.heads())
        self.batch_matmul = shard(ops.BatchMatMul(), "attn", ((dp, mp, 1, 1), (dp, mp, 1, 1)))
        self.mul = shard(ops.Mul(), "attn", ((dp, mp, 1, 1), ()))
        self.add_mask = shard(ops.Add(), "attn", ((dp, mp, 1, 1), (1, 1, 1, 1)))
        self.softmax = shard(ops.Softmax(), "attn", ((dp, mp, 1, 1),))
        self.batch_matmul2 = shard(ops.BatchMatMul(), "attn", ((dp, mp, 1, 1), (dp, mp, 1, 1)))
        self.merge = shard(ops.Transpose(), "attn", par.merge())
        row, row_out, row_bias = par.row()
        self.projection = Linear(hidden, hidden, seed + 3, shard, "proj", row, row_bias, row_out)
        mask = np.triu(np.full((seq, seq), -1e4, np.float32), k=1).reshape(1, 1, seq, seq)
        self.mask = Tensor(mask)
        self.scale = 1.0 / float(np.sqrt(self.head_dim))
        self.flash_attention = None  # causal (next_tokens=0), the softmax's scale in the op, as MindFormers sets it
        if par.flash:
            self.flash_attention = shard(ops.FlashAttentionScore(heads, scale_value=self.scale, next_tokens=0,
                                                                 input_layout="BNSD"), "attn", par.flash_attention())

    def construct(self, x):  # x: (batch * seq, hidden)
        batch = x.shape[0] // self.seq
        shape = (batch, self.seq, self.heads, self.head_dim)
        q = self.transpose(self.reshape(self.dense_q(x), shape), (0, 2, 1, 3))
        v = self.transpose_v(self.reshape(self.dense_v(x), shape), (0, 2, 1, 3))
        if self.flash_attention is not None:
            k = self.transpose_k(self.reshape(self.dense_k(x), shape), (0, 2, 1, 3))
            context = self.flash_attention(q, k, v, None, None, None, None)[3]
        else:
            k = self.transpose_k(self.reshape(self.dense_k(x), shape), (0, 2, 3, 1))
            score = self.add_mask(self.mul(self.batch_matmul(q, k), self.scale), self.mask)
            context = self.batch_matmul2(self.softmax(score), v)
        context = self.reshape(self.merge(context, (0, 2, 1, 3)), (batch * self.seq, self.heads * self.head_dim))
        return self.projection(context)


class FeedForward(nn.Cell):
    def __init__(self, hidden, ffn, dp, mp, seed, shard, par: GPTParallel | None = None):
        super().__init__()
        par = par or GPTParallel(dp, mp)
        self.mapping = Linear(hidden, ffn, seed, shard, "ffn1", *par.column())
        self.gelu = shard(ops.GeLU(), "gelu", ((par.rows, mp),))
        row, row_out, row_bias = par.row()
        self.projection = Linear(ffn, hidden, seed + 1, shard, "ffn2", row, row_bias, row_out)

    def construct(self, x):
        return self.projection(self.gelu(self.mapping(x)))


def _moe(hidden: int, moe_config: MoEConfig, parallel_config: MoEParallelConfig, seed: int) -> MoE:
    """An MoE feed-forward (hidden -> 4 hidden -> hidden) whose weights, like the rest of the model's, depend only
    on ``seed`` (not on the global seed), so every construction of the model starts from the same values."""
    moe = MoE(hidden, 4 * hidden, 0.0, moe_config=moe_config, parallel_config=parallel_config)
    for i, param in enumerate((moe.router.dense.weight, moe.ffn.mapping.weight, moe.ffn.projection.weight)):
        param.set_data(_rand(param.shape, seed + i))
    return moe


class Block(nn.Cell):
    """Attention and feed-forward with residuals; with a ``moe`` (an ``MoE`` layer) as the feed-forward it returns
    ``(x, aux_loss)``."""

    def __init__(self, seq, hidden, heads, dp, mp, seed, shard, moe: MoE | None = None,
                 par: GPTParallel | None = None):
        super().__init__()
        par = par or GPTParallel(dp, mp)
        self.moe = moe is not None
        self.layernorm1 = LayerNorm(hidden, shard, dp, par)
        self.attention = Attention(seq, hidden, heads, dp, mp, seed, shard, par)
        self.add = shard(ops.Add(), "residual", par.residual())
        self.layernorm2 = LayerNorm(hidden, shard, dp, par)
        self.output = moe if moe is not None else FeedForward(hidden, 4 * hidden, dp, mp, seed + 10, shard, par)
        self.add2 = shard(ops.Add(), "residual", par.residual())

    def construct(self, x):
        x = self.add(x, self.attention(self.layernorm1(x)))
        if self.moe:
            out, aux_loss = self.output(self.layernorm2(x))
            return self.add2(x, out), aux_loss
        return self.add2(x, self.output(self.layernorm2(x)))


class GPT(nn.Cell):
    """``GPT(dp, mp, hints)(ids)``: ids (batch, seq) int32 -> logits (batch * seq, vocab), any batch; with a
    ``moe_config``, ``(logits, aux_loss)``.

    ``use_seq_parallel``, ``context_parallel`` (cp: the devices are dp x cp x mp), ``context_parallel_algo`` and
    ``use_flash_attention``: MindFormers' settings of the same names (``graphpar.models.gpt_parallel``)."""

    def __init__(self, dp: int = 2, mp: int = 4, hints: frozenset = ALL, seq: int = 16, hidden: int = 64,
                 heads: int = 4, vocab: int = 128, layers: int = 2, moe_config: MoEConfig | None = None,
                 expert_parallel: int = 1, use_seq_parallel: bool = False, context_parallel: int = 1,
                 context_parallel_algo: str = "colossalai_cp", use_flash_attention: bool = False):
        super().__init__()
        shard = _Sharder(hints)
        self.moe_config = moe_config
        if moe_config is None and expert_parallel != 1:
            raise ConfigError("GPT", "expert_parallel", expert_parallel, reason=(
                f"expert_parallel={expert_parallel} splits the experts of an MoE feed-forward; give moe_config="
                "MoEConfig(expert_num=...) too, or leave expert_parallel=1"))
        par = GPTParallel(dp, mp, context_parallel, use_seq_parallel, context_parallel_algo, use_flash_attention)
        if (use_seq_parallel or context_parallel > 1) and hints != ALL:
            raise ValueError(f"GPT(use_seq_parallel={use_seq_parallel}, context_parallel={context_parallel}): these "
                             f"are strategies of every role, so they need hints=ALL (got {sorted(hints)})")
        self.seq, self.hidden = seq, hidden
        self.embedding_table = Parameter(_rand((vocab, hidden), 1), "embedding_table")
        self.position_embedding = Parameter(_rand((1, seq, hidden), 2), "position_embedding")
        gather, add_position = par.embedding()
        self.gather = shard(ops.Gather(), "embed", gather)
        self.add_position = shard(ops.Add(), "embed", add_position)
        self.reshape = ops.Reshape()
        self.blocks = nn.CellList([Block(seq, hidden, heads, dp, mp, 100 * (i + 1), shard, None if moe_config is None
                                         else _moe(hidden, moe_config, MoEParallelConfig(dp, mp, expert_parallel),
                                                   100 * (i + 1) + 20), par)
                                   for i in range(layers)])
        if moe_config is not None:
            self.add_aux = ops.Add().shard(((), ()))
        self.layernorm = LayerNorm(hidden, shard, dp, par)
        self.logits = shard(ops.MatMul(transpose_b=True), "logits", par.logits())

    def construct(self, ids):
        x = self.add_position(self.gather(self.embedding_table, ids, 0), self.position_embedding)
        x = self.reshape(x, (ids.shape[0] * self.seq, self.hidden))
        aux_loss = None
        for block in self.blocks:
            if self.moe_config is None:
                x = block(x)
                continue
            x, block_aux = block(x)
            aux_loss = block_aux if aux_loss is None else self.add_aux(aux_loss, block_aux)
        logits = self.logits(self.layernorm(x), self.embedding_table)
        return logits if self.moe_config is None else (logits, aux_loss)


def gpt_data(batch: int = 8, seq: int = 16, vocab: int = 128, seed: int = 0):
    """(ids (batch, seq) int32, labels (batch * seq,) int32): next-token targets of a random sequence."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=(batch, seq + 1)).astype(np.int32)
    return tokens[:, :-1], tokens[:, 1:].reshape(-1)


class MoEWithLossCell(nn.Cell):
    """``WithLossCell`` of a network returning ``(logits, aux_loss)``: ``loss_fn(logits, label) + aux_loss``."""

    def __init__(self, backbone: nn.Cell, loss_fn: nn.Cell):
        super().__init__(auto_prefix=False)
        self._backbone, self._loss_fn = backbone, loss_fn
        self.add = ops.Add().shard(((), ()))

    def construct(self, data, label):
        logits, aux_loss = self._backbone(data)
        return self.add(self._loss_fn(logits, label), aux_loss)


def gpt_train_cell(net: GPT, lr: float = 0.1) -> nn.TrainOneStepCell:
    """Sparse softmax cross-entropy on the logits (plus the MoE's load-balancing loss) and MindSpore's
    Momentum(lr, 0.9): the tests' training cell."""
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    with_loss = nn.WithLossCell(net, loss) if net.moe_config is None else MoEWithLossCell(net, loss)
    return nn.TrainOneStepCell(with_loss, nn.Momentum(net.trainable_params(), lr, 0.9))
