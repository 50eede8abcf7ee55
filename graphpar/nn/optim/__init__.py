from graphpar.nn.optim.momentum import SGD as SGD
from graphpar.nn.optim.momentum import Adam as Adam
from graphpar.nn.optim.momentum import AdamWeightDecay as AdamWeightDecay
from graphpar.nn.optim.momentum import Momentum as Momentum
from graphpar.nn.optim.optimizer import Optimizer as Optimizer
from graphpar.nn.optim.lamb import Lamb as Lamb
