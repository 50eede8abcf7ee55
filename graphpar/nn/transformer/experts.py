"""The experts' feed-forward of MindSpore's MoE (``FeedForward(..., expert_num=E)`` with its ``_Linear`` layers):
every expert's two linear layers as one ``BatchMatMul`` over the expert dimension.

Input and output are ``(data_parallel // expert_parallel, expert_num, tokens, hidden)``: the outer dimension splits
the tokens ``dp // ep`` ways, the expert dimension (of the activations and of every weight) ``expert_parallel``
ways, the inner feed-forward dimension ``model_parallel`` ways: MindSpore's strategies
``((dp/ep, ep, 1, 1), (ep, 1, mp))`` and ``((dp/ep, ep, 1, mp), (ep, mp, 1))``. Weights are MindSpore's: ``(E, in,
out)`` drawn from ``normal`` (sigma 0.01), biases ``(1, E, 1, out)`` of zeros.
"""

from __future__ import annotations

from graphpar import ops
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter
from graphpar.errors import ConfigError
from graphpar.nn.cell import Cell
from graphpar.nn.layer.basic import Dropout

# hidden_act -> its primitive; each is element-wise, so it takes the mapping's output strategy
_ACTIVATIONS = {"gelu": ops.GeLU, "fast_gelu": ops.FastGeLU, "relu": ops.ReLU, "relu6": ops.ReLU6,
                "sigmoid": ops.Sigmoid, "tanh": ops.Tanh, "silu": ops.SiLU}


def activation_op(hidden_act: str, api: str):
    """The primitive of ``hidden_act`` (a name MindSpore's FeedForward accepts that graphpar has a primitive for)."""
    if not isinstance(hidden_act, str) or hidden_act.lower() not in _ACTIVATIONS:
        raise ConfigError(api, "hidden_act", hidden_act, valid=sorted(_ACTIVATIONS),
                          reason=f"hidden_act={hidden_act!r} is not an activation the experts can shard")
    return _ACTIVATIONS[hidden_act.lower()]()


class ExpertLinear(Cell):
    """One linear layer of every expert: ``x (outer, E, tokens, d_in) @ weight (E, d_in, d_out) + bias``."""

    def __init__(self, d_in: int, d_out: int, experts: int, dtype):
        super().__init__()
        self.weight = Parameter(initializer("normal", (experts, d_in, d_out), dtype), name="weight")
        self.bias = Parameter(initializer("zeros", (1, experts, 1, d_out), dtype), name="bias")
        self.matmul = ops.BatchMatMul()  # strategies: ExpertFeedForward.split
        self.bias_add = ops.Add()

    def construct(self, x):
        return self.bias_add(self.matmul(x, self.weight), self.bias)


class ExpertFeedForward(Cell):
    """``mapping`` (hidden -> ffn, then ``hidden_act``), ``projection`` (ffn -> hidden), dropout on the output."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int, dropout_rate: float, hidden_act: str,
                 expert_num: int, param_init_type, dp: int, mp: int, ep: int):
        super().__init__()
        outer = dp // ep
        for name, size in (("hidden_size", hidden_size), ("ffn_hidden_size", ffn_hidden_size)):
            if size % mp:
                raise ConfigError("MoE", name, size, reason=f"{name}={size} must be a multiple of model_parallel="
                                  f"{mp}, as the experts' weights are split model_parallel ways")
        if not 0 <= dropout_rate < 1:
            raise ConfigError("MoE", "dropout_rate", dropout_rate,
                              reason=f"dropout_rate={dropout_rate} must be in [0, 1)")
        self.mapping = ExpertLinear(hidden_size, ffn_hidden_size, expert_num, param_init_type)
        self.activation = activation_op(hidden_act, "MoE")
        self.projection = ExpertLinear(ffn_hidden_size, hidden_size, expert_num, param_init_type)
        self.dropout = Dropout(p=dropout_rate)
        self.sizes = (hidden_size, ffn_hidden_size)
        self.split(outer, mp, ep)

    def split(self, outer: int, mp: int, ep: int) -> None:
        """Sets the experts' strategies: tokens ``outer`` (= dp / ep) ways, experts ``ep`` ways, the inner
        feed-forward dimension ``mp`` ways (MindSpore's FeedForward strategies for that parallel config). The
        stage search's layer profile calls it to price the experts split over a tensor group
        (``compile.plans.stage_profile``) and puts the layer's own split back after."""
        self.mapping.matmul.shard(((outer, ep, 1, 1), (ep, 1, mp)))
        self.mapping.bias_add.shard(((outer, ep, 1, mp), (1, ep, 1, mp)))
        self.activation.shard(((outer, ep, 1, mp),))
        self.projection.matmul.shard(((outer, ep, 1, mp), (ep, mp, 1)))
        self.projection.bias_add.shard(((outer, ep, 1, 1), (1, ep, 1, 1)))
        self.expert_split = (outer, mp, ep)

    def construct(self, x):
        return self.dropout(self.projection(self.activation(self.mapping(x))))
