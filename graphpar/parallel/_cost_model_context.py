"""MindSpore's ``mindspore.parallel._cost_model_context`` module path (its parallel tests import from it); the
settings and what graphpar does instead of each are ``graphpar._context.cost_model``."""

from graphpar._context.cost_model import _get_algo_single_loop as _get_algo_single_loop
from graphpar._context.cost_model import _get_multi_subgraphs as _get_multi_subgraphs
from graphpar._context.cost_model import _get_rp_matmul_mem_coef as _get_rp_matmul_mem_coef
from graphpar._context.cost_model import _set_algo_single_loop as _set_algo_single_loop
from graphpar._context.cost_model import _set_multi_subgraphs as _set_multi_subgraphs
from graphpar._context.cost_model import _set_rp_matmul_mem_coef as _set_rp_matmul_mem_coef
from graphpar._context.cost_model import get_cost_model_context as get_cost_model_context
from graphpar._context.cost_model import reset_cost_model_context as reset_cost_model_context
from graphpar._context.cost_model import set_cost_model_context as set_cost_model_context

__all__ = ["set_cost_model_context", "get_cost_model_context", "reset_cost_model_context", "_set_multi_subgraphs",
           "_get_multi_subgraphs", "_set_algo_single_loop", "_get_algo_single_loop", "_set_rp_matmul_mem_coef",
           "_get_rp_matmul_mem_coef"]
