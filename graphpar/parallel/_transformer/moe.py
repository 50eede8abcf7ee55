"""``mindspore.parallel._transformer.moe``: the Mixture of Experts layer (``graphpar.nn.transformer.moe``)."""

from graphpar.nn.transformer.moe import MoE as MoE
from graphpar.nn.transformer.moe import MoEConfig as MoEConfig
from graphpar.nn.transformer.moe import default_moe_config as default_moe_config
from graphpar.nn.transformer.router import Router as Router
from graphpar.nn.transformer.router import TopkRouter as TopkRouter
from graphpar.nn.transformer.router import calculate_expert_capacity as calculate_expert_capacity

__all__ = ["MoEConfig"]
