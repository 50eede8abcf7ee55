"""MindSpore's ``mindspore.common``: dtype, Tensor, Parameter, initializer, seed."""

from graphpar.common import dtype as dtype
from graphpar.common.parameter import Parameter as Parameter
from graphpar.common.parameter import ParameterTuple as ParameterTuple
from graphpar.common.seed import get_seed as get_seed
from graphpar.common.seed import set_seed as set_seed
from graphpar.common.tensor import Tensor as Tensor
