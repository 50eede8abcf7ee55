"""MindSpore's parallel configs of its parallel transformer (``mindspore.parallel._transformer.op_parallel_config``,
``mindspore.nn.transformer`` in 1.x): how many ways a layer splits its data (``data_parallel``), its weights
(``model_parallel``) and its experts (``expert_parallel``). They are plain values read by the layers that take them
(``MoE``, ``graphpar.models.GPT``); each layer turns them into ``shard()`` strategies, as MindSpore's layers do.

``TransformerOpParallelConfig`` carries MindSpore's other transformer settings too (pipeline, optimizer shard,
recompute, embedding layout), which belong to MindSpore's ``Transformer`` layers, not built in graphpar: they are
refused by name unless left at their defaults.
"""

from __future__ import annotations

from typing import Any

from graphpar.errors import ConfigError, SettingTypeError


def check_positive_int(api: str, name: str, value: Any) -> int:
    """MindSpore's ``Validator.check_positive_int``: an int (not a bool) > 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingTypeError(api, name, value, reason=f"{name} must be a positive int, got {value!r}")
    if value <= 0:
        raise ConfigError(api, name, value, reason=f"{name} must be a positive int, got {value}")
    return value


class _Config:
    """MindSpore's ``_Config``: prints its settings one per line."""

    def __str__(self) -> str:
        return "[ParallelConfig]\n" + "".join(f"{k.lstrip('_')}:{v}\n" for k, v in vars(self).items())


class OpParallelConfig(_Config):
    """``OpParallelConfig(data_parallel=1, model_parallel=1)``."""

    def __init__(self, data_parallel: int = 1, model_parallel: int = 1):
        self.data_parallel = data_parallel
        self.model_parallel = model_parallel

    @property
    def data_parallel(self) -> int:
        return self._data_parallel

    @data_parallel.setter
    def data_parallel(self, value: int) -> None:
        self._data_parallel = check_positive_int(type(self).__name__, "data_parallel", value)

    @property
    def model_parallel(self) -> int:
        return self._model_parallel

    @model_parallel.setter
    def model_parallel(self, value: int) -> None:
        self._model_parallel = check_positive_int(type(self).__name__, "model_parallel", value)


class MoEParallelConfig(OpParallelConfig):
    """``MoEParallelConfig(data_parallel=1, model_parallel=1, expert_parallel=1)``: the experts are split
    ``expert_parallel`` ways, carved out of ``data_parallel`` (MoE's feed-forward runs with ``data_parallel //
    expert_parallel`` data parallel; ``MoE`` checks that it divides)."""

    def __init__(self, data_parallel: int = 1, model_parallel: int = 1, expert_parallel: int = 1):
        super().__init__(data_parallel, model_parallel)
        self.expert_parallel = expert_parallel

    @property
    def expert_parallel(self) -> int:
        return self._expert_parallel

    @expert_parallel.setter
    def expert_parallel(self, value: int) -> None:
        self._expert_parallel = check_positive_int(type(self).__name__, "expert_parallel", value)

    @property
    def dpmp(self) -> OpParallelConfig:
        return OpParallelConfig(self.data_parallel, self.model_parallel)


# TransformerOpParallelConfig's arguments that only MindSpore's Transformer layers read, with their defaults.
_TRANSFORMER_ONLY = {"pipeline_stage": 1, "micro_batch_num": 1, "recompute": None, "optimizer_shard": False,
                     "gradient_aggregation_group": 4, "vocab_emb_dp": True}


class TransformerOpParallelConfig(MoEParallelConfig):
    """``TransformerOpParallelConfig(data_parallel=1, model_parallel=1, expert_parallel=1, pipeline_stage=1,
    micro_batch_num=1, recompute=..., optimizer_shard=False, gradient_aggregation_group=4, vocab_emb_dp=True)``.

    graphpar builds its data, model and expert parallel ways (``moe_parallel_config``, ``dp_mp_config``). The
    others configure MindSpore's ``Transformer`` layers, which graphpar does not have (set pipeline stages and the
    optimizer shard with ``set_auto_parallel_context``): a value other than the default is refused by name."""

    def __init__(self, data_parallel: int = 1, model_parallel: int = 1, expert_parallel: int = 1, **others: Any):
        for name, value in others.items():
            if name not in _TRANSFORMER_ONLY:
                raise ConfigError("TransformerOpParallelConfig", name, value, valid=["data_parallel",
                                  "model_parallel", "expert_parallel", *_TRANSFORMER_ONLY],
                                  reason=f"unknown argument {name!r}")
            if value != _TRANSFORMER_ONLY[name] and not (name == "recompute" and value is False):
                raise ConfigError("TransformerOpParallelConfig", name, value, reason=(
                    f"{name}={value!r} configures MindSpore's Transformer layers, which graphpar does not build; "
                    f"valid: {name}={_TRANSFORMER_ONLY[name]!r} (set pipeline stages, the optimizer shard and "
                    "recompute with set_auto_parallel_context / Cell.recompute)"))
        super().__init__(data_parallel, model_parallel, expert_parallel)

    @property
    def moe_parallel_config(self) -> MoEParallelConfig:
        return MoEParallelConfig(self.data_parallel, self.model_parallel, self.expert_parallel)

    @property
    def dp_mp_config(self) -> OpParallelConfig:
        return self.dpmp


default_dpmp_config = OpParallelConfig()
default_moeparallel_config = MoEParallelConfig()
