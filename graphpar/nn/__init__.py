"""graphpar.nn: Cells, layers, losses, wrappers and optimizers with MindSpore's names."""

from graphpar.common.parameter import Parameter as Parameter
from graphpar.common.parameter import ParameterTuple as ParameterTuple
from graphpar.nn import learning_rate_schedule as learning_rate_schedule
from graphpar.nn import utils as utils
from graphpar.nn.cell import Cell as Cell
from graphpar.nn.containers import CellList as CellList
from graphpar.nn.containers import SequentialCell as SequentialCell
from graphpar.nn.grad_reducer import DistributedGradReducer as DistributedGradReducer
from graphpar.nn.grad_reducer import PipelineGradReducer as PipelineGradReducer
from graphpar.nn.micro_interleaved import MicroBatchInterleaved as MicroBatchInterleaved
from graphpar.nn.layer import *  # noqa: F401,F403
from graphpar.nn.learning_rate_schedule import (  # noqa: F401
    CosineDecayLR, ExponentialDecayLR, InverseDecayLR, LearningRateSchedule, NaturalExpDecayLR, PolynomialDecayLR,
    WarmUpLR, cosine_decay_lr, exponential_decay_lr, inverse_decay_lr, natural_exp_decay_lr, piecewise_constant_lr,
    polynomial_decay_lr, warmup_lr)
from graphpar.nn.loss import (  # noqa: F401
    CrossEntropyLoss, L1Loss, LossBase, MAELoss, MSELoss, SmoothL1Loss, SoftmaxCrossEntropyWithLogits)
from graphpar.nn.optim import SGD, Adam, AdamWeightDecay, Lamb, Momentum, Optimizer  # noqa: F401
from graphpar.nn.pipeline_cell import PipelineCell  # noqa: F401
from graphpar.nn.wrap import TrainOneStepCell, WithEvalCell, WithLossCell  # noqa: F401
from graphpar.nn.grad_accumulation import GradAccumulation, GradAccumulationCell  # noqa: F401
from graphpar.nn.loss_scale import (  # noqa: F401
    DynamicLossScaleUpdateCell, FixedLossScaleUpdateCell, TrainOneStepWithLossScaleCell)
