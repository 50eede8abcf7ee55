"""MindSpore's ``mindspore.parallel.algo_parameter_config`` module path (its tests import from it)."""

from graphpar._context import get_algo_parameters as get_algo_parameters
from graphpar._context import reset_algo_parameters as reset_algo_parameters
from graphpar._context import set_algo_parameters as set_algo_parameters

__all__ = ["get_algo_parameters", "reset_algo_parameters", "set_algo_parameters"]
