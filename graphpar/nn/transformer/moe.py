"""MindSpore's Mixture of Experts layer (``mindspore.parallel._transformer.moe``: ``MoEConfig``, ``MoE``) built from
graphpar's ops with MindSpore's ``shard()`` strategies, so the planner plans it like any other network.

``MoE(hidden_size, ffn_hidden_size, dropout_rate, hidden_act='gelu', param_init_type=float32, moe_config=MoEConfig(),
parallel_config=MoEParallelConfig())(x)`` → ``(output, aux_loss)``: the tokens of ``x`` (``(..., hidden_size)``) are
cut into ``data_parallel`` groups, routed (``router.py``: top-k, capacity, load-balancing loss), dispatched to their
experts' capacity slots, run through the experts (``experts.py``) and combined back with the router's weights;
``aux_loss`` is the load-balancing loss times ``aux_loss_factor`` (add it to the training loss).

How it is split (``data_parallel`` = dp, ``expert_parallel`` = ep): routing, dispatch and combine are split dp ways
over the groups (each device its own groups, no communication); the experts run on ``(dp/ep, E, ep·C, h)`` with the
expert dimension split ep ways and the outer one dp/ep ways. Between the two the layer regroups the dispatched
tokens ``(E, dp, C, h)`` as ``(dp/ep, E, ep, C, h)`` with only local transposes (the group dimension split dp/ep × ep
ways), so moving the ep factor from the groups to the experts is one redistribution: the planner's AlltoAll, which
XLA compiles to an ``all-to-all`` over each expert-parallel group (the ranks that differ in their ep coordinate);
the combine moves it back with another. **Changed** from MindSpore: its FeedForward reshapes the ``(E·dp·C, h)``
rows to ``(dp/ep, E, ...)`` without that regrouping, so for ``data_parallel > expert_parallel`` a token routed to
expert e is computed by another expert's weights depending on its group; graphpar computes every token with the
expert its router chose (the same as MindSpore when ``data_parallel == expert_parallel``).
"""

from __future__ import annotations

from graphpar import ops
from graphpar.common import dtype as mstype
from graphpar.errors import ConfigError
from graphpar.nn.cell import Cell
from graphpar.nn.transformer.experts import ExpertFeedForward
from graphpar.nn.transformer.op_parallel_config import (MoEParallelConfig, check_positive_int,
                                                        default_moeparallel_config)
from graphpar.nn.transformer.router import Router, calculate_expert_capacity, router_groups


def _positive_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError("MoEConfig", name, value, reason=f"{name} must be a positive float, got {value!r}")
    return float(value)


class MoEConfig:
    """``MoEConfig(expert_num=1, capacity_factor=1.1, aux_loss_factor=0.05, num_experts_chosen=1,
    expert_group_size=None, group_wise_a2a=False, comp_comm_parallel=False, comp_comm_parallel_degree=2)``, checked
    as MindSpore checks it. ``expert_group_size`` is MindSpore's "number of tokens in each data parallel group": the
    router's group size (``None``: the tokens cut into ``data_parallel`` groups, MindSpore's default); ``MoE`` checks
    that it divides the tokens into a multiple of ``data_parallel`` groups. ``group_wise_a2a`` and
    ``comp_comm_parallel`` (MindSpore's Ascend communication schedules) are not built and refused by name."""

    def __init__(self, expert_num: int = 1, capacity_factor: float = 1.1, aux_loss_factor: float = 0.05,
                 num_experts_chosen: int = 1, expert_group_size: int | None = None, group_wise_a2a: bool = False,
                 comp_comm_parallel: bool = False, comp_comm_parallel_degree: int = 2):
        self.expert_num = check_positive_int("MoEConfig", "expert_num", expert_num)
        self.capacity_factor = _positive_float("capacity_factor", capacity_factor)
        self.aux_loss_factor = _positive_float("aux_loss_factor", aux_loss_factor)
        self.num_experts_chosen = check_positive_int("MoEConfig", "num_experts_chosen", num_experts_chosen)
        self.comp_comm_parallel_degree = check_positive_int("MoEConfig", "comp_comm_parallel_degree",
                                                            comp_comm_parallel_degree)
        if expert_group_size is not None:
            check_positive_int("MoEConfig", "expert_group_size", expert_group_size)
        if capacity_factor < 1.0:
            raise ConfigError("MoEConfig", "capacity_factor", capacity_factor,
                              reason=f"capacity_factor must be >= 1.0, got {capacity_factor}")
        if aux_loss_factor >= 1.0:
            raise ConfigError("MoEConfig", "aux_loss_factor", aux_loss_factor,
                              reason=f"aux_loss_factor must be < 1.0, got {aux_loss_factor}")
        if num_experts_chosen > expert_num:
            raise ConfigError("MoEConfig", "num_experts_chosen", num_experts_chosen, reason=(
                f"num_experts_chosen={num_experts_chosen} must not be larger than expert_num={expert_num}"))
        for name, value in (("group_wise_a2a", group_wise_a2a), ("comp_comm_parallel", comp_comm_parallel)):
            if value is not False:
                raise ConfigError("MoEConfig", name, value, valid=[False], reason=(
                    f"{name}={value!r} is MindSpore's Ascend communication schedule, not built in graphpar "
                    "(XLA schedules the MoE's all-to-alls itself)"))
        self.expert_group_size = expert_group_size
        self.group_wise_a2a, self.comp_comm_parallel = group_wise_a2a, comp_comm_parallel


default_moe_config = MoEConfig()


def check_moe_config(moe_config, parallel_config) -> None:
    """MindSpore's ``_check_moe_config``: the experts split evenly over ``expert_parallel``, which divides
    ``data_parallel`` (the expert-parallel ranks are data-parallel ranks of the rest of the network)."""
    if not isinstance(moe_config, MoEConfig):
        raise ConfigError("MoE", "moe_config", type(moe_config).__name__, valid=["MoEConfig(...)"],
                          reason=f"moe_config must be a MoEConfig, got {type(moe_config).__name__}")
    if not isinstance(parallel_config, MoEParallelConfig):
        raise ConfigError("MoE", "parallel_config", type(parallel_config).__name__, reason=(
            f"parallel_config must be a MoEParallelConfig (or TransformerOpParallelConfig), got "
            f"{type(parallel_config).__name__}"))
    ep, dp = parallel_config.expert_parallel, parallel_config.data_parallel
    if moe_config.expert_num == 1:  # one expert: nothing to split (MindSpore checks only expert_num > 1)
        return
    if moe_config.expert_num % ep:
        raise ConfigError("MoE", "expert_num", moe_config.expert_num, reason=(
            f"expert_num={moe_config.expert_num} in MoEConfig must be a multiple of expert_parallel={ep} in "
            f"{type(parallel_config).__name__}; valid expert_parallel: a divisor of {moe_config.expert_num}"))
    if dp % ep:
        raise ConfigError("MoE", "expert_parallel", ep, reason=(
            f"data_parallel={dp} must be a multiple of expert_parallel={ep} when using MoE (the experts are split "
            f"over data-parallel ranks); e.g. data_parallel={ep * max(1, dp // ep)}, expert_parallel={ep}"))


class MoE(Cell):
    """The MoE layer (module docstring). Inputs: ``x`` ``(batch, seq, hidden)`` or ``(tokens, hidden)``, the
    token count a multiple of ``data_parallel``. Outputs: ``(output of x's shape, aux_loss scalar)``."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int, dropout_rate: float, hidden_act: str = "gelu",
                 param_init_type=mstype.float32, moe_config: MoEConfig = default_moe_config,
                 parallel_config: MoEParallelConfig = default_moeparallel_config):
        super().__init__()
        check_moe_config(moe_config, parallel_config)
        dp, mp = parallel_config.data_parallel, parallel_config.model_parallel
        # one expert is not split (MindSpore's FeedForward takes expert_parallel only when expert_num > 1)
        ep = parallel_config.expert_parallel if moe_config.expert_num > 1 else 1
        self.hidden_size, self.expert_dim, self.dp_group, self.ep = hidden_size, moe_config.expert_num, dp, ep
        self.capacity_factor, self.aux_loss_factor = moe_config.capacity_factor, moe_config.aux_loss_factor
        self.num_experts_chosen = moe_config.num_experts_chosen
        self.expert_group_size = moe_config.expert_group_size
        outer = dp // ep
        self.ffn = ExpertFeedForward(hidden_size, ffn_hidden_size, dropout_rate, hidden_act, self.expert_dim,
                                     param_init_type, dp, mp, ep)
        self.router = Router(d_model=hidden_size, moe_config=moe_config, routing_policy=None, training=True,
                             parallel_config=parallel_config)
        self.reshape = ops.Reshape()
        self.cast = ops.Cast()
        self.transpose_2dim = ops.Transpose().shard(((dp, 1),))
        self.transpose_3dim = ops.Transpose().shard(((dp, 1, 1),))
        self.transpose_4dim = ops.Transpose().shard(((1, dp, 1, 1),))
        self.transpose_4dim_dp = ops.Transpose().shard(((1, 1, dp, 1),))
        # the regrouping (E, dp/ep, ep, C, h) <-> (dp/ep, E, ep, C, h): local on both sides
        self.to_experts = ops.Transpose().shard(((1, outer, ep, 1, 1),))
        self.from_experts = ops.Transpose().shard(((outer, 1, ep, 1, 1),))
        self.batch_mm = ops.BatchMatMul().shard(((dp, 1, 1), (dp, 1, 1)))
        self.batch_mm2 = ops.BatchMatMul().shard(((dp, 1, 1), (dp, 1, 1)))
        self.mul = ops.Mul().shard(((), ()))

    def construct(self, input_tensor):
        input_shape, hidden = input_tensor.shape, self.hidden_size
        experts = self.expert_dim
        tokens = input_tensor.size // hidden
        groups = router_groups(tokens, self.dp_group, self.expert_group_size, "MoE", tuple(input_shape))
        tokens_per_group = tokens // groups
        input_tensor = self.reshape(input_tensor, (groups, tokens_per_group, hidden))
        capacity = calculate_expert_capacity(self.num_experts_chosen, tokens_per_group, self.capacity_factor,
                                             experts)
        # dispatch / combine: (groups, tokens_per_group, experts, capacity)
        dispatch_tensor, combine_tensor, aux_loss = self.router(input_tensor)
        input_tensor = self.transpose_3dim(input_tensor, (0, 2, 1))  # (groups, hidden, tokens_per_group)
        dispatch_tensor = self.reshape(dispatch_tensor, (groups, tokens_per_group, experts * capacity))
        dispatch_tensor = self.cast(dispatch_tensor, input_tensor.dtype)
        expert_input = self.batch_mm(input_tensor, dispatch_tensor)  # (groups, hidden, experts * capacity)
        expert_input = self.reshape(expert_input, (groups * hidden, experts * capacity))
        expert_input = self.transpose_2dim(expert_input, (1, 0))
        expert_input = self.reshape(expert_input, (experts, capacity, groups, hidden))
        expert_input = self.transpose_4dim_dp(expert_input, (0, 2, 1, 3))  # (experts, groups, capacity, hidden)
        expert_output = self._experts(expert_input, groups, capacity)  # (experts, groups, capacity, hidden)
        expert_output = self.transpose_4dim(expert_output, (1, 3, 0, 2))  # (groups, hidden, experts, capacity)
        expert_output = self.reshape(expert_output, (groups, hidden, experts * capacity))
        combine_tensor = self.reshape(combine_tensor, (groups, tokens_per_group, experts * capacity))
        combine_tensor = self.transpose_3dim(combine_tensor, (0, 2, 1))
        combine_tensor = self.cast(combine_tensor, expert_output.dtype)
        combined_output = self.batch_mm2(expert_output, combine_tensor)  # (groups, hidden, tokens_per_group)
        combined_output = self.transpose_3dim(combined_output, (0, 2, 1))
        combined_output = self.reshape(combined_output, input_shape)
        return combined_output, self.mul(self.aux_loss_factor, aux_loss)

    def _experts(self, expert_input, groups, capacity):
        """(experts, groups, capacity, hidden) -> the experts' feed-forward -> the same shape. The dispatch
        AlltoAll is the redistribution into the experts' first BatchMatMul, the combine AlltoAll the one into
        ``from_experts``. A device's ``groups / data_parallel`` router groups (``expert_group_size``) are one
        run of ``capacity`` slots each: merged into the slot dimension."""
        experts, ep, hidden = self.expert_dim, self.ep, self.hidden_size
        outer = self.dp_group // ep
        slots = capacity * (groups // self.dp_group)
        x = self.reshape(expert_input, (experts, outer, ep, slots, hidden))
        x = self.to_experts(x, (1, 0, 2, 3, 4))  # (outer, experts, ep, capacity, hidden)
        x = self.reshape(x, (outer, experts, ep * slots, hidden))
        x = self.ffn(x)
        x = self.reshape(x, (outer, experts, ep, slots, hidden))
        x = self.from_experts(x, (1, 0, 2, 3, 4))  # (experts, outer, ep, capacity, hidden)
        return self.reshape(x, (experts, groups, capacity, hidden))
