"""A DeepSeek-V3-like MoE GPT written the MindSpore way, whose Parameters come from ``initializer`` (so
``no_init_parameters()`` defers them all), unhinted (for AUTO_PARALLEL's searches) unless a parallel config is given.

Public sizes of DeepSeek-V3: 61 layers, hidden 7,168, 128 heads, sequence 4,096, vocabulary 129,280, 256 routed
experts + 1 shared, top-8 routing, expert hidden 2,048. What is approximated (said where the bench prints it):

* attention is standard multi-head attention with 128 heads of 56 (MLA's low-rank compressed keys/values and its
  decoupled RoPE heads are not built): more attention weights and activations than MLA's;
* every layer is an MoE layer (DeepSeek-V3's first 3 are dense);
* the experts are MindSpore's ``MoE`` layer (``graphpar.nn.transformer.MoE``): two matrices with GeLU per expert
  (DeepSeek's are SwiGLU, three), GShard-style dense dispatch / combine with capacity factor 1.1 and softmax top-k
  routing (DeepSeek's is sigmoid with bias-based balancing, no token dropping); the shared expert is a dense
  feed-forward of the same hidden size beside it;
* the router's groups are of 1,024 tokens (``MoEConfig(expert_group_size=1024)``, a quarter of a sequence;
  ``expert_group``): GShard's dense masks are ``(tokens, experts, capacity)`` per group with the capacity
  proportional to the group, so a whole-sequence group (4,096 tokens, capacity 141) keeps 36,096 floats per token
  per mask; groups of 1,024 (capacity ``ceil(8 * 1024 * 1.1 / 256) = 36``) keep 9,216 (1.3 x the hidden size),
  while each expert still expects ``8 * 1024 / 256 = 32`` tokens per group, enough that capacity 1.1 drops few
  (smaller groups, e.g. 256 with 8 expected and capacity 9, drop more to imbalance). DeepSeek itself dispatches
  sparsely (no masks); the group size is the dense formulation's knob;
* float32 parameters and activations (DeepSeek trains in FP8 / BF16), the model's own LayerNorm (not RMSNorm);
* the load-balancing loss is summed over the layers and added to the loss, as MindSpore's MoE transformer does.
"""

from __future__ import annotations

import graphpar as ms
from examples.gpt_no_init import Attention, Dense, LayerNorm, causal_mask
from graphpar import nn, ops
from graphpar.common.initializer import Normal, initializer
from graphpar.nn.transformer import MoE, MoEConfig, MoEParallelConfig

DEEPSEEK_V3 = dict(vocab=129280, seq=4096, hidden=7168, heads=128, layers=61, experts=256, top_k=8, expert_hidden=2048,
                   expert_group=1024)


class MoEBlock(nn.Cell):
    """Attention (``examples/gpt_no_init.py``'s, unhinted), then the routed experts plus the shared expert, each
    with a residual; returns (x, aux_loss)."""

    def __init__(self, seq, hidden, heads, experts, top_k, expert_hidden, causal, parallel=None, expert_group=None):
        super().__init__()
        self.norm1, self.norm2 = LayerNorm(hidden, None), LayerNorm(hidden, None)
        self.attention = Attention(seq, hidden, heads, None, None, causal)
        self.shared_in = Dense(hidden, expert_hidden, None, None, "column")
        self.shared_out = Dense(expert_hidden, hidden, None, None, "row")
        self.gelu = ops.GeLU()
        self.moe = MoE(hidden, expert_hidden, 0.0, moe_config=MoEConfig(expert_num=experts, num_experts_chosen=top_k,
                                                                      expert_group_size=expert_group),
                       parallel_config=parallel or MoEParallelConfig(1, 1, 1))
        self.add1, self.add2, self.add3 = ops.Add(), ops.Add(), ops.Add()

    def construct(self, x):
        x = self.add1(x, self.attention(self.norm1(x)))
        h = self.norm2(x)
        routed, aux_loss = self.moe(h)
        shared = self.shared_out(self.gelu(self.shared_in(h)))
        return self.add3(x, self.add2(routed, shared)), aux_loss


class MoEGPT(nn.Cell):
    """ids (batch, seq) int32 -> (logits (batch * seq, vocab), the summed load-balancing loss)."""

    def __init__(self, vocab, seq, hidden, heads, layers, experts, top_k, expert_hidden, parallel=None,
                 expert_group=None):
        super().__init__()
        self.seq, self.hidden = seq, hidden
        self.embedding = ms.Parameter(initializer(Normal(0.02), [vocab, hidden], ms.float32), name="embedding")
        self.gather = ops.Gather()
        self.reshape = ops.Reshape()
        causal = causal_mask(seq)
        self.blocks = nn.CellList([MoEBlock(seq, hidden, heads, experts, top_k, expert_hidden, causal, parallel,
                                            expert_group) for _ in range(layers)])
        self.add_aux = ops.Add()
        self.norm = LayerNorm(hidden, None)
        self.logits = ops.MatMul(transpose_b=True)

    def construct(self, ids):
        x = self.reshape(self.gather(self.embedding, ids, 0), (ids.shape[0] * self.seq, self.hidden))
        aux = None
        for block in self.blocks:
            x, block_aux = block(x)
            aux = block_aux if aux is None else self.add_aux(aux, block_aux)
        return self.logits(self.norm(x), self.embedding), aux


class MoELoss(nn.Cell):
    """Cross-entropy on the logits plus the load-balancing loss."""

    def __init__(self, backbone):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self._loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.add = ops.Add()

    def construct(self, ids, label):
        logits, aux = self._backbone(ids)
        return self.add(self._loss_fn(logits, label), aux)


def loss_network(vocab, seq, hidden, heads, layers, experts, top_k, expert_hidden, parallel=None, expert_group=None):
    return MoELoss(MoEGPT(vocab, seq, hidden, heads, layers, experts, top_k, expert_hidden, parallel, expert_group))
