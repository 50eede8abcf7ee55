"""MindSpore's ``auto_parallel_context()`` (``mindspore.parallel._auto_parallel_context``): the object behind
``set_auto_parallel_context``, whose ``get_*`` / ``set_*`` methods MindSpore's scripts and tests call directly.

Here it is a view over graphpar's auto-parallel settings, no second store: every method reads
``get_auto_parallel_context`` / ``current_parallel()`` or writes through ``set_auto_parallel_context``, so a value
set either way is seen both ways. The methods for settings graphpar does not keep (``gradient_fp32_sync``,
``force_fp32_communication``, ``optimizer_weight_shard_aggregated_save``, ``all_reduce_fusion_split_indices``, whose
keys ``set_auto_parallel_context`` accepts with a notice or refuses; whether ``parameter_broadcast`` was given)
raise :class:`NoSuchSettingError` naming what graphpar does instead; answering MindSpore's default would report a
value the user may have set otherwise.
"""

from __future__ import annotations

from typing import Any

from graphpar._context.state import (
    current_parallel, get_auto_parallel_context, reset_auto_parallel_context, set_auto_parallel_context)
from graphpar.errors import GraphparError, SettingTypeError

_COMM_FUSION_DEFAULT_MB = 64  # MindSpore's fusion threshold when comm_fusion gives no "size" for a kind

_NOT_KEPT = {
    "gradient_fp32_sync": "XLA reduces each gradient in the dtype the step computes it in",
    "force_fp32_communication": "collectives run in the dtype of the values they move; set_auto_parallel_context "
                                "refuses the key",
    "optimizer_weight_shard_aggregated_save": "checkpoints of a sharded optimizer are saved whole "
                                              "(graphpar.checkpoint gathers the slices)",
    "all_reduce_fusion_split_indices": "XLA's collective combiners group the gradient AllReduces",
    "parameter_broadcast_is_set": "it keeps parameter_broadcast's value, read by "
                                  "get_auto_parallel_context('parameter_broadcast'), not whether it was given",
}


class NoSuchSettingError(GraphparError, ValueError):
    """A MindSpore auto-parallel setting graphpar keeps no value for (``key``), so it has nothing true to return."""

    def __init__(self, method: str, key: str):
        self.key = key
        super().__init__(f"auto_parallel_context().{method}(): graphpar keeps no {key!r} setting ({_NOT_KEPT[key]}); "
                         f"valid: the settings get_auto_parallel_context reads")


class AutoParallelContextView:
    """``auto_parallel_context()``: MindSpore's ``_AutoParallelContext`` methods over graphpar's settings."""

    def reset(self) -> None:
        reset_auto_parallel_context()

    def set_device_num(self, device_num: int) -> None:
        set_auto_parallel_context(device_num=device_num)

    def get_device_num(self) -> int:
        return get_auto_parallel_context("device_num")

    def get_device_num_is_set(self) -> bool:
        """Whether ``device_num`` was set (unset, it is every device of the job)."""
        return current_parallel().device_num is not None

    def set_global_rank(self, global_rank: int) -> None:
        set_auto_parallel_context(global_rank=global_rank)

    def get_global_rank(self) -> int:
        return get_auto_parallel_context("global_rank")

    def set_gradients_mean(self, gradients_mean: bool) -> None:
        set_auto_parallel_context(gradients_mean=gradients_mean)

    def get_gradients_mean(self) -> bool:
        return get_auto_parallel_context("gradients_mean")

    def get_parameter_broadcast_is_set(self) -> bool:
        """MindSpore answers whether ``parameter_broadcast`` was given at all (True after ``=False`` too); graphpar
        keeps the flag's value only, so it refuses rather than answer the value."""
        raise NoSuchSettingError("get_parameter_broadcast_is_set", "parameter_broadcast_is_set")

    def set_parallel_mode(self, parallel_mode: str) -> None:
        set_auto_parallel_context(parallel_mode=parallel_mode)

    def get_parallel_mode(self) -> str:
        return get_auto_parallel_context("parallel_mode")

    def get_pipeline_stages(self) -> int:
        return get_auto_parallel_context("pipeline_stages")

    def get_pipeline_interleave(self) -> bool:
        return get_auto_parallel_context("pipeline_config")["pipeline_interleave"]

    def get_pipeline_scheduler(self) -> str:
        return get_auto_parallel_context("pipeline_config")["pipeline_scheduler"]

    def get_full_batch(self) -> bool:
        return get_auto_parallel_context("full_batch")

    def get_enable_parallel_optimizer(self) -> bool:
        return get_auto_parallel_context("enable_parallel_optimizer")

    def set_enable_all_reduce_fusion(self, enable_all_reduce_fusion: bool) -> None:
        """comm_fusion's ``openstate`` (MindSpore's TypeError for a non-bool)."""
        if not isinstance(enable_all_reduce_fusion, bool):
            raise SettingTypeError("auto_parallel_context().set_enable_all_reduce_fusion", "enable_all_reduce_fusion",
                                   enable_all_reduce_fusion, reason=f"enable_all_reduce_fusion must be bool, got "
                                                                    f"{type(enable_all_reduce_fusion).__name__}")
        set_auto_parallel_context(comm_fusion={"openstate": enable_all_reduce_fusion})

    def get_enable_all_reduce_fusion(self) -> bool:
        return self._openstate()

    def get_enable_all_gather_fusion(self) -> bool:
        return self._openstate()

    def get_enable_reduce_scatter_fusion(self) -> bool:
        return self._openstate()

    def allgather_fusion_threshold_mb(self) -> int:
        return self._threshold("allgather")

    def reducescatter_fusion_threshold_mb(self) -> int:
        return self._threshold("reducescatter")

    def get_gradient_fp32_sync(self) -> Any:
        raise NoSuchSettingError("get_gradient_fp32_sync", "gradient_fp32_sync")

    def set_gradient_fp32_sync(self, gradient_fp32_sync: bool) -> None:
        raise NoSuchSettingError("set_gradient_fp32_sync", "gradient_fp32_sync")

    def get_force_fp32_communication(self) -> Any:
        raise NoSuchSettingError("get_force_fp32_communication", "force_fp32_communication")

    def get_optimizer_weight_shard_aggregated_save(self) -> Any:
        raise NoSuchSettingError("get_optimizer_weight_shard_aggregated_save", "optimizer_weight_shard_aggregated_save")

    def set_optimizer_weight_shard_aggregated_save(self, optimizer_weight_shard_aggregated_save: bool) -> None:
        raise NoSuchSettingError("set_optimizer_weight_shard_aggregated_save", "optimizer_weight_shard_aggregated_save")

    def get_all_reduce_fusion_split_indices(self, group: str = "") -> Any:
        raise NoSuchSettingError("get_all_reduce_fusion_split_indices", "all_reduce_fusion_split_indices")

    @staticmethod
    def _openstate() -> bool:
        """MindSpore's three fusion switches are comm_fusion's one ``openstate``."""
        return get_auto_parallel_context("comm_fusion")["openstate"]

    @staticmethod
    def _threshold(kind: str) -> int:
        """The ``size`` threshold (MB) comm_fusion gives ``kind``, else MindSpore's 64 MB."""
        config = get_auto_parallel_context("comm_fusion")[kind]
        return config["config"] if config["mode"] == "size" else _COMM_FUSION_DEFAULT_MB


_VIEW = AutoParallelContextView()


def auto_parallel_context() -> AutoParallelContextView:
    """MindSpore's accessor of its (singleton) auto-parallel context object."""
    return _VIEW
