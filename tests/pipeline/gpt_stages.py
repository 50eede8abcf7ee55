"""The small GPT the multi-process pipeline tests train (graphpar.models.gpt, its output projection tied to the
vocabulary embedding), staged as a MindSpore user stages it: blocks spread over the stages, the final norm in the
last; the embedding follows its consumers into stage 0 and the tied logits its producer into the last stage."""

from graphpar import nn
from graphpar.models.gpt import ALL, GPT, gpt_data

STAGES, LAYERS, MICRO, SEQ, HIDDEN, VOCAB = 4, 4, 4, 8, 32, 32


def staged_gpt(stages: int = STAGES) -> GPT:
    net = GPT(dp=1, mp=2, hints=ALL, seq=SEQ, hidden=HIDDEN, heads=2, vocab=VOCAB, layers=LAYERS)
    for i, block in enumerate(net.blocks):
        block.pipeline_stage = i * stages // LAYERS
    net.layernorm.pipeline_stage = stages - 1
    return net


def train_cell(net: GPT) -> nn.TrainOneStepCell:
    """MindSpore's PipelineCell (the sum of the micro-batches' losses) with Momentum(0.1, 0.9)."""
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, loss), MICRO),
                               nn.Momentum(net.trainable_params(), 0.1, 0.9))


def data():
    return gpt_data(batch=8, seq=SEQ, vocab=VOCAB, seed=3)
