"""The parallel optimizer: which parameters are stored sharded over their data-parallel group, and how.

MindSpore's ``enable_parallel_optimizer`` keeps a parameter whose layout repeats it over several devices (its
*data-parallel group*: the mesh axes its layout does not use) as one slice per device of that group, together with
its optimizer state; the forward pass gathers the whole (model-parallel) slice back. A parameter is sharded on its
first dimension only, and only when

* its size is at least ``parallel_optimizer_threshold`` KB (default 64), and
* its first dimension's local size divides by the group size (``optimizer_weight_shard_size``, default the whole
  group; a size that is not a product of leading replica axes falls back to the whole group, as MindSpore does).

and it was not made with ``Parameter(..., parallel_optimizer=False)`` (MindSpore's opt-out: that parameter and its
optimizer state stay in their compute layout, and its gradient is all-reduced). Otherwise it stays as it is and the
reason is kept (strategy files and notices show it). This module is pure: it
decides layouts from shapes, specs and the configuration; ``compile.opt_shard`` applies them in the train step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Spec = tuple[tuple[str, ...], ...]
GATHERED = "graphpar_opt_gathered"  # checkpoint name of a gathered parameter (level3 re-gathers it for backward)
OPTED_OUT = "Parameter(parallel_optimizer=False)"  # the reason kept for a parameter its user left out


@dataclass(frozen=True)
class OptimizerParallelConfig:
    """``enable_parallel_optimizer`` and ``parallel_optimizer_config`` as the compile stage reads them."""

    enabled: bool = False
    threshold_kb: int = 64
    shard_size: int = -1
    level: str = "level1"
    gradient_accumulation_shard: bool = False
    excluded: frozenset[str] = frozenset()  # names of the Parameters made with parallel_optimizer=False

    @classmethod
    def from_context(cls, pctx: Any, parameters: Iterable[Any] = ()) -> "OptimizerParallelConfig":
        """The context's settings; ``parameters`` (graphpar ``Parameter``s): those with ``parallel_optimizer=False``
        are left out."""
        cfg = pctx.parallel_optimizer_config
        return cls(bool(pctx.enable_parallel_optimizer), int(cfg["parallel_optimizer_threshold"]),
                   int(cfg["optimizer_weight_shard_size"]), str(cfg["optimizer_level"]),
                   bool(cfg["gradient_accumulation_shard"]),
                   frozenset(p.name for p in parameters if not p.parallel_optimizer))

    @property
    def shard_accumulated_gradients(self) -> bool:
        """level2/level3 (or ``gradient_accumulation_shard``): accumulate gradients in the sharded layout, a
        reduce-scatter per micro-batch for 1/g of the accumulation memory. MindSpore ties them so: its
        ``optimizer_level="level2"`` sets ``grad_accumulation_shard`` (its docs: "Please using optimizer_level:
        level2 to replace this config"), and level3 (``zero3``) slices the accumulation buffer as that does."""
        return self.enabled and (self.level in ("level2", "level3") or self.gradient_accumulation_shard)

    @property
    def regather_for_backward(self) -> bool:
        """level3: the gathered weights are not kept from the forward pass; backward gathers them again."""
        return self.enabled and self.level == "level3"


@dataclass(frozen=True)
class ParameterShard:
    """The optimizer sharding of one parameter: compute layout, storage layout and the group it is split over."""

    name: str
    shape: tuple[int, ...]
    compute_spec: Spec
    storage_spec: Spec
    group_axes: tuple[str, ...] = ()
    group_size: int = 1
    reason: str = ""  # why it is not sharded (empty when it is)

    @property
    def sharded(self) -> bool:
        return self.group_size > 1


def _replica_axes(spec: Spec, names: Sequence[str]) -> list[str]:
    used = {a for axes in spec for a in axes}
    return [a for a in names if a not in used]


def _group(replica: list[str], sizes: dict[str, int], shard_size: int) -> tuple[list[str], str]:
    """The replica axes to shard over: all of them, or the leading ones whose product is ``shard_size``."""
    total = int(np.prod([sizes[a] for a in replica])) if replica else 1
    if shard_size in (-1, total):
        return replica, ""
    acc, chosen = 1, []
    for a in replica:
        if acc >= shard_size:
            break
        chosen.append(a)
        acc *= sizes[a]
    if acc == shard_size:
        return chosen, ""
    return replica, (f"optimizer_weight_shard_size={shard_size} does not divide the data-parallel group of "
                     f"{total}; the whole group is used")


def shard_parameter(name: str, shape: Sequence[int], itemsize: int, compute_spec: Spec, mesh_names: Sequence[str],
                    mesh_sizes: Sequence[int], config: OptimizerParallelConfig) -> ParameterShard:
    """Decide the storage layout of one parameter under the parallel optimizer (see the module docstring)."""
    shape = tuple(int(d) for d in shape)
    spec = tuple(tuple(a) for a in compute_spec) + tuple(() for _ in range(len(shape) - len(compute_spec)))

    def keep(reason: str) -> ParameterShard:
        return ParameterShard(name, shape, spec, spec, reason=reason)

    if not config.enabled:
        return keep("the parallel optimizer is off")
    if name in config.excluded:
        return keep(OPTED_OUT)
    if not shape:
        return keep("a scalar")
    nbytes = int(np.prod(shape)) * itemsize
    if nbytes < config.threshold_kb * 1024:
        return keep(f"{nbytes / 1024:g} KB is below parallel_optimizer_threshold={config.threshold_kb} KB")
    sizes = dict(zip(mesh_names, (int(s) for s in mesh_sizes)))
    replica = _replica_axes(spec, mesh_names)
    if not replica:
        return keep("its layout already uses every device (no data-parallel group)")
    axes, note = _group(replica, sizes, config.shard_size)
    group = int(np.prod([sizes[a] for a in axes]))
    local = shape[0] // int(np.prod([sizes[a] for a in spec[0]])) if spec[0] else shape[0]
    if local % group:
        return keep(f"its first dimension's local size {local} does not divide by the data-parallel group of "
                    f"{group}")
    storage = ((*spec[0], *axes),) + spec[1:]
    return ParameterShard(name, shape, spec, storage, tuple(axes), group, note)


def canonical_spec(partition_spec: Any, ndim: int) -> Spec:
    """A ``PartitionSpec`` as graphpar's canonical spec: one tuple of mesh axes per dimension."""
    out = []
    for entry in tuple(partition_spec) + (None,) * (ndim - len(tuple(partition_spec))):
        if entry is None:
            out.append(())
        elif isinstance(entry, str):
            out.append((entry,))
        else:
            out.append(tuple(entry))
    return tuple(out[:ndim])


def shard_step(shard: ParameterShard, mesh_names: Sequence[str], mesh_sizes: Sequence[int]) -> int:
    """MindSpore's ``opt_weight_shard_step``: the rank distance between neighbours of the sharding group."""
    if not shard.sharded:
        return 0
    sizes = dict(zip(mesh_names, mesh_sizes))
    last = shard.group_axes[-1]
    return int(np.prod([sizes[a] for a in mesh_names[list(mesh_names).index(last) + 1:]]))
