"""``_VirtualDatasetCell``: MindSpore's wrapper that marks where a network's inputs come from the dataset.

MindSpore inserts a ``_VirtualDataset`` op in front of a network compiled in SEMI_AUTO / AUTO (its parallel unit
tests wrap networks in ``_VirtualDatasetCell`` by hand); that op carries the dataset strategy, so the inputs enter
the graph already split. graphpar's plans give every network input its dataset layout from the context
(``dataset_strategy``, ``full_batch``) whatever Cell is compiled, so the wrapper is an identity: it calls its
backbone with the inputs unchanged and keeps the backbone's Parameter names (MindSpore builds it with
``auto_prefix=False``). MindSpore's ``_virtual_dataset.add_prim_attr("repeat_dim_direct", ...)`` (where the devices
that repeat a batch slice sit in its device matrix) is refused by name: graphpar's dataset layouts split the batch
over the leading mesh axes, and no attribute moves them.
"""

from __future__ import annotations

from typing import Any

from graphpar.errors import ConfigError
from graphpar.nn.cell import Cell


class _VirtualDataset:
    """The dataset op of :class:`_VirtualDatasetCell`: an identity (see the module docstring)."""

    name = "_VirtualDataset"

    def __call__(self, *inputs: Any) -> tuple:
        return inputs

    def add_prim_attr(self, name: str, value: Any) -> "_VirtualDataset":
        raise ConfigError("_VirtualDataset.add_prim_attr", name, value, reason=(
            f"{name}={value!r} is not supported: graphpar gives every network input its dataset layout from "
            "set_auto_parallel_context(dataset_strategy=..., full_batch=...), splitting the batch over the leading "
            "mesh axes, and no attribute of this op changes that"))

    def shard(self, *args: Any, **kwargs: Any) -> "_VirtualDataset":
        raise ConfigError("_VirtualDataset.shard", "strategy", args or kwargs, reason=(
            "not supported: set the dataset's split with set_auto_parallel_context(dataset_strategy=...)"))


class _VirtualDatasetCell(Cell):
    """``_VirtualDatasetCell(backbone)``: ``backbone`` called on the network inputs as they come from the
    dataset (see the module docstring)."""

    def __init__(self, backbone: Cell):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self._virtual_dataset = _VirtualDataset()

    def construct(self, *inputs: Any) -> Any:
        return self._backbone(*self._virtual_dataset(*inputs))
