"""The small GPT the multi-process pipeline tests train (graphpar.models.gpt, its output projection tied to the
vocabulary embedding), staged as a MindSpore user stages it: blocks spread over the stages, the final norm in the
last; the embedding follows its consumers into stage 0 and the tied logits its producer into the last stage."""

import numpy as np

from graphpar import nn, ops
from graphpar.models.gpt import ALL, GPT, gpt_data

STAGES, LAYERS, MICRO, SEQ, HIDDEN, VOCAB = 4, 4, 4, 8, 32, 32


def staged_gpt(stages: int = STAGES, scheduler: str | None = None) -> GPT:
    """``scheduler`` (with ``pipeline_interleave``): ``"1f1b"`` or ``"zero_bubble_v"``, the blocks cut into 2
    segments per stage, block ``i`` the ``i``-th virtual stage in model order, set as MindSpore documents each
    scheduler's layout (interleaved: segment 1 of stages 0, 1, ... after segment 0; zero_bubble_v: segment 1 back
    from the last stage, so stage 0 holds the first and the last blocks)."""
    net = GPT(dp=1, mp=2, hints=ALL, seq=SEQ, hidden=HIDDEN, heads=2, vocab=VOCAB, layers=LAYERS)
    if scheduler is None:
        for i, block in enumerate(net.blocks):
            block.pipeline_stage = i * stages // LAYERS
        net.layernorm.pipeline_stage = stages - 1
        return net
    chunks = 2 * stages

    def place(chunk: int) -> tuple[int, int]:
        segment, stage = divmod(chunk, stages)
        return (stages - 1 - stage if scheduler == "zero_bubble_v" and segment else stage), segment

    for i, block in enumerate(net.blocks):
        block.pipeline_stage, block.pipeline_segment = place(i * chunks // LAYERS)
    net.layernorm.pipeline_stage, net.layernorm.pipeline_segment = place(chunks - 1)
    return net


class TokenLoss(nn.Cell):
    """Mean cross-entropy of the logits ``(batch * seq, vocab)`` against labels ``(batch, seq)`` (one row per
    sequence, as the ids: a dataset yields them row by row and the PipelineCell splits both alike)."""

    def __init__(self):
        super().__init__()
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.reshape = ops.Reshape()

    def construct(self, logits, labels):
        return self.loss(logits, self.reshape(labels, (-1,)))


def train_cell(net: GPT) -> nn.TrainOneStepCell:
    """MindSpore's PipelineCell (the sum of the micro-batches' losses) with Momentum(0.1, 0.9)."""
    loss = TokenLoss()
    return nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, loss), MICRO),
                               nn.Momentum(net.trainable_params(), 0.1, 0.9))


def data():
    """The steps' batch: ids and labels (8, SEQ)."""
    ids, labels = gpt_data(batch=8, seq=SEQ, vocab=VOCAB, seed=3)
    return ids, labels.reshape(8, SEQ)


def model_batch():
    """The global batch of one ``Model.train`` step on an unsharded dataset of the first 4 sequences: each of a
    stage's 2 devices draws the same 4 rows."""
    ids, labels = data()
    return np.tile(ids[:4], (2, 1)), np.tile(labels[:4], (2, 1))
