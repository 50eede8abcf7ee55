"""The GPT the stage benchmarks plan: ``examples/gpt_no_init.py``'s MindSpore-style GPT, whose Parameters come
from ``initializer`` (so ``no_init_parameters()`` defers them all) and whose ops carry ``shard()`` hints only when
``mp`` is given (Megatron's column- then row-parallel matmuls over ``mp`` devices, the batch not split; the ops
that only split the batch unhinted): unhinted for AUTO_PARALLEL's searches, hinted to price Megatron's layer. The
causal mask is one numpy array shared by every layer (16 MB at sequence 2,048: one per layer would be 1.6 GB for
96)."""

from __future__ import annotations

from examples.gpt_no_init import GPT
from graphpar import nn

GPT3_175B = dict(vocab=51200, seq=2048, hidden=12288, heads=96, layers=96)


def loss_network(vocab, seq, hidden, heads, layers, mp=None):
    """``WithLossCell(GPT(...), sparse softmax cross-entropy)``; ``mp``: Megatron's hints over ``mp`` devices."""
    net = GPT(vocab, seq, hidden, heads, layers, None, mp)
    return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
