"""MoE routing as MindSpore's parallel transformer routes (``mindspore.parallel._transformer.moe``: ``Router``,
``TopkRouter``): which expert each token goes to, where in that expert's capacity it lands, the weights its
experts' outputs are combined with, and the load-balancing loss.

Tokens are routed within groups (``data_parallel`` of them, or of ``MoEConfig(expert_group_size=...)`` tokens each;
each device holds whole groups). For each of the ``num_experts_chosen`` rounds, in that order:

1. the router's softmax probabilities, with the experts a token already got in earlier rounds set to zero;
2. the expert of the largest remaining probability (the first on ties) and that probability (the gate);
3. the round's load-balancing loss, ``E² · mean_{g,e}(fraction of the group's tokens choosing e · mean probability of
   e)`` with the probabilities renormalised to sum 1 (the Switch Transformer's loss);
4. capacity: in token order within the group, each token takes the next free slot of its expert (slots taken in
   earlier rounds count); a token whose slot is ``>= expert_capacity`` is dropped for this round: its gate is 0 and
   the expert stays available to it in later rounds;
5. the combine weight ``gate`` at ``(token, expert, slot)``.

With ``num_experts_chosen > 1`` each token's weights are divided by their sum (``+ 1e-9``). A token dropped in every
round has all-zero weights: the MoE layer's output for it is zero (a transformer block's residual passes it on).
"""

from __future__ import annotations

from graphpar import ops
from graphpar.common import dtype as mstype
from graphpar.errors import ConfigError
from graphpar.nn.cell import Cell
from graphpar.nn.layer.basic import Dense


def calculate_expert_capacity(k: int, tokens_per_group: int, capacity_factor: float, expert_dim: int) -> int:
    """MindSpore's expert capacity: ``ceil(k · tokens_per_group · capacity_factor / expert_dim)``, computed in
    floating point as MindSpore computes it."""
    res = k * tokens_per_group * capacity_factor / expert_dim
    res_int = int(res)
    return res_int if res < 0 or res == res_int else res_int + 1


def router_groups(tokens: int, data_parallel: int, expert_group_size: int | None, api: str = "MoE",
                  shape: tuple[int, ...] | None = None) -> int:
    """How many groups the router cuts ``tokens`` into: ``data_parallel`` (MindSpore's default), or groups of
    ``expert_group_size`` tokens (``MoEConfig``), whose count must be a multiple of ``data_parallel`` (each device
    routes whole groups). Smaller groups keep the dense dispatch / combine masks, ``(groups, group, experts,
    capacity)`` with the capacity proportional to the group, linear in the tokens rather than quadratic."""
    what = f"{tokens} tokens" + ("" if shape is None else f" (input {shape})")
    if expert_group_size is None:
        if tokens % data_parallel:
            raise ConfigError(api, "data_parallel", data_parallel, reason=(
                f"{what} do not split into data_parallel={data_parallel} groups (the router's groups); "
                f"valid: a token count that is a multiple of {data_parallel}"))
        return data_parallel
    if tokens % (expert_group_size * data_parallel):
        valid = (f"an expert_group_size dividing {tokens // data_parallel} (the tokens per rank)"
                 if tokens % data_parallel == 0 else f"a token count that is a multiple of {data_parallel}")
        raise ConfigError(api, "expert_group_size", expert_group_size, reason=(
            f"{what} do not split into router groups of expert_group_size={expert_group_size}, a whole number on "
            f"each of data_parallel={data_parallel} ranks; valid: {valid}"))
    return tokens // expert_group_size


class TopkRouter(Cell):
    """``TopkRouter(d_model, moe_config, training=True, parallel_config=None)``: router logits ``(data_parallel,
    tokens_per_group, expert_num)`` → ``(dispatch, combine, loss)``; dispatch (bool) and combine (float) are
    ``(data_parallel, tokens_per_group, expert_num, expert_capacity)``, loss a scalar (not yet scaled by
    ``aux_loss_factor``). Every op is split ``data_parallel`` ways over the groups, as MindSpore shards them; the
    groups are ``data_parallel`` or of ``moe_config.expert_group_size`` tokens (:func:`router_groups`)."""

    def __init__(self, d_model: int, moe_config, training: bool = True, parallel_config=None):
        super().__init__()
        dp = parallel_config.data_parallel
        self.d_model, self.training, self.dp_group = d_model, training, dp
        self.expert_dim = moe_config.expert_num
        self.expert_group_size = moe_config.expert_group_size
        self.capacity_factor = moe_config.capacity_factor
        self.num_experts_chosen = moe_config.num_experts_chosen
        g3, g4 = (dp, 1, 1), (dp, 1, 1, 1)
        self.reshape = ops.Reshape()
        self.cast = ops.Cast()
        self.softmax = ops.Softmax(axis=-1).shard((g3,))
        self.argmax = ops.ArgMaxWithValue(axis=-1, keep_dims=False).shard((g3,))
        self.onehot = ops.OneHot().shard((g3, (), ()))
        self.onehot2 = ops.OneHot().shard((g3, (), ()))
        self.onehot3 = ops.OneHot().shard((g4, (), ()))
        self.reduce_mean = ops.ReduceMean(keep_dims=False).shard((g3,))
        self.reduce_mean2 = ops.ReduceMean(keep_dims=False).shard((g3,))
        self.reduce_mean3 = ops.ReduceMean(keep_dims=False).shard(((dp, 1),))
        self.mul = ops.Mul().shard(((dp, 1), (dp, 1)))
        self.mul2 = ops.Mul().shard(((), ()))
        self.mul3 = ops.Mul().shard(((), ()))
        self.mul4 = ops.Mul().shard((g3, g3))
        self.mul5 = ops.Mul().shard((g3, g3))
        self.mul6 = ops.Mul().shard(((dp, 1), (dp, 1)))
        self.mul7 = ops.Mul().shard(((dp, 1), (dp, 1)))
        self.mul8 = ops.Mul().shard((g3, g3))
        self.mul9 = ops.Mul().shard((g4, g4))
        self.not_equal = ops.NotEqual().shard((g4, ()))
        self.div1 = ops.RealDiv().shard((g3, g3))
        self.div2 = ops.RealDiv().shard((g4, g4))
        self.add = ops.Add().shard((g3, g3))
        self.add1 = ops.Add().shard((g3, ()))
        self.add2 = ops.Add().shard((g4, g4))
        self.add4 = ops.Add().shard((g4, ()))
        self.sub = ops.Sub().shard(((), g3))
        self.cumsum = ops.CumSum(exclusive=True).shard((g3,))
        self.less = ops.Less().shard((g3, ()))
        self.reduce_sum = ops.ReduceSum(keep_dims=False).shard((g3,))
        self.reduce_sum_keep = ops.ReduceSum(keep_dims=True).shard((g3,))
        self.reduce_sum_keep2 = ops.ReduceSum(keep_dims=True).shard((g4,))
        self.expand = ops.ExpandDims().shard(((dp, 1),))
        self.expand2 = ops.ExpandDims().shard((g3,))
        self.add_scala = ops.Add().shard(((), ()))

    def construct(self, router_logits):
        experts = self.expert_dim
        router_logits = self.reshape(router_logits, (-1, experts))
        groups = router_groups(router_logits.shape[0], self.dp_group, self.expert_group_size, "TopkRouter")
        tokens_per_group = router_logits.shape[0] // groups
        capacity = calculate_expert_capacity(self.num_experts_chosen, tokens_per_group, self.capacity_factor,
                                             experts)
        router_logits = self.reshape(router_logits, (groups, tokens_per_group, experts))
        router_prob = self.softmax(router_logits)
        loss = None
        accum_expert_mask = mask_count = accum_combine = None
        for chosen in range(self.num_experts_chosen):
            if chosen > 0:  # the experts a token already got are not chosen again
                router_prob = self.mul4(router_prob, self.sub(1.0, accum_expert_mask))
            expert_index, expert_gate = self.argmax(router_prob)
            expert_mask = self.onehot(expert_index, experts, 1.0, 0.0)
            router_prob_normal = self.div1(router_prob, self.add1(self.reduce_sum_keep(router_prob, -1), 1e-9))
            round_loss = self._auxiliary_loss(expert_mask, router_prob_normal)
            loss = round_loss if loss is None else self.add_scala(loss, round_loss)
            expert_mask, expert_gate, expert_mask_flat, position = self._maskout_overflowed_tokens(
                expert_mask, capacity, expert_gate, mask_count)
            accum_expert_mask = expert_mask if accum_expert_mask is None else self.add(accum_expert_mask,
                                                                                       expert_mask)
            taken = self.reduce_sum_keep(expert_mask, 1)
            mask_count = taken if mask_count is None else self.add(mask_count, taken)
            combine = self.mul7(expert_gate, expert_mask_flat)
            combine = self.mul8(self.expand(combine, -1), self.onehot2(expert_index, experts, 1.0, 0.0))
            slot = self.onehot3(self.cast(position, mstype.int32), capacity, 1.0, 0.0)
            combine = self.mul9(self.expand2(combine, -1), slot)
            accum_combine = combine if accum_combine is None else self.add2(accum_combine, combine)
        if self.num_experts_chosen > 1:  # each token's weights sum to 1
            total = self.reduce_sum_keep2(self.reduce_sum_keep2(accum_combine, -1), -2)
            accum_combine = self.div2(accum_combine, self.add4(total, 1e-9))
        dispatch = self.not_equal(accum_combine, 0.0)
        return dispatch, accum_combine, loss

    def _auxiliary_loss(self, expert_mask, router_prob):
        density = self.reduce_mean(expert_mask, 1)  # (groups, experts): the fraction of tokens choosing each
        density_proxy = self.reduce_mean2(router_prob, 1)  # (groups, experts): the mean probability of each
        loss = self.reduce_mean3(self.mul(density, density_proxy))
        return self.mul3(self.mul2(loss, float(self.expert_dim)), float(self.expert_dim))

    def _maskout_overflowed_tokens(self, expert_mask, capacity, expert_gate, taken_before):
        """Keeps the tokens whose slot (their rank among the group's tokens choosing that expert, after the slots
        taken in earlier rounds) is below the capacity."""
        cumsum = self.cumsum(expert_mask, 1)
        if taken_before is not None:
            cumsum = self.add(cumsum, taken_before)
        position = self.mul4(cumsum, expert_mask)
        expert_mask = self.mul5(self.cast(self.less(position, capacity), mstype.float32), expert_mask)
        expert_mask_flat = self.reduce_sum(expert_mask, -1)
        expert_gate = self.mul6(expert_gate, expert_mask_flat)
        return expert_mask, expert_gate, expert_mask_flat, position


class Router(Cell):
    """``Router(d_model, moe_config, routing_policy=None, training=True, parallel_config=None)``: the router's
    logits (``dense``, a bias-free ``Dense(d_model, expert_num)`` on the float32 tokens, split over the groups), then
    its routing policy (``TopkRouter`` by default)."""

    def __init__(self, d_model: int, moe_config, routing_policy=None, training: bool = True, parallel_config=None):
        super().__init__()
        dp = parallel_config.data_parallel
        self.d_model, self.expert_dim, self.training = d_model, moe_config.expert_num, training
        self.dense = Dense(in_channels=d_model, out_channels=self.expert_dim, has_bias=False)
        self.dense.matmul.shard(((dp, 1), (1, 1)))
        self.cast = ops.Cast()
        self.reshape = ops.Reshape()
        self.router = routing_policy if routing_policy is not None else TopkRouter(
            d_model, moe_config, training=training, parallel_config=parallel_config)

    def construct(self, input_tensor):
        input_tensor = self.cast(input_tensor, mstype.float32)
        return self.router(self.dense(self.reshape(input_tensor, (-1, self.d_model))))
