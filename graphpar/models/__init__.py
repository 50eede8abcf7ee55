"""graphpar.models: networks the MindSpore tutorials use, ready-made (``from graphpar.models import resnet50``), and a
GPT-style transformer written as MindSpore's parallel transformer writes one (``graphpar.models.gpt``).

The small networks the tests and benchmarks share live here too, so that both import one copy:
``graphpar.models.mlp`` (Dense MLPs, residual FFN stacks, the search problem's hand-planned MLP) and
``graphpar.models.megatron`` (Megatron's MLP block with its strategies, the quickstart network)."""

from graphpar.models.gpt import GPT as GPT
from graphpar.models.losses import SoftmaxCrossEntropyExpand as SoftmaxCrossEntropyExpand
from graphpar.models.resnet import ResNet as ResNet
from graphpar.models.resnet import ResidualBlock as ResidualBlock
from graphpar.models.resnet import ResidualBlockBase as ResidualBlockBase
from graphpar.models.resnet import resnet18 as resnet18
from graphpar.models.resnet import resnet34 as resnet34
from graphpar.models.resnet import resnet50 as resnet50
from graphpar.models.resnet import resnet101 as resnet101
