"""``Cell.set_comm_fusion(fusion_type, recurse=True)``: MindSpore's fusion groups for gradient AllReduces.

In MindSpore the gradients of Parameters with the same ``fusion_type`` are reduced by one fused AllReduce, so a user
groups layers into buckets. XLA has no per-Parameter grouping: its all-reduce combiner pass merges the reductions of
one step by size and dependencies (the threshold is an XLA flag on GPU,
``--xla_gpu_all_reduce_combine_threshold_bytes``; on CPU the combiner merges what it can). graphpar therefore checks
the arguments as MindSpore does and says once what happens instead; the execute dump
(``save_graphs``) shows the collectives XLA compiled.
"""

from __future__ import annotations

from typing import Any

from graphpar._logging import notice_once


def set_comm_fusion(cell: Any, fusion_type: int, recurse: bool) -> None:
    if isinstance(fusion_type, bool) or not isinstance(fusion_type, int) or fusion_type < 0:
        raise TypeError(f"{type(cell).__name__}.set_comm_fusion(fusion_type): fusion_type must be an int >= 0, got "
                        f"{fusion_type!r}")
    if not isinstance(recurse, bool):
        raise TypeError(f"{type(cell).__name__}.set_comm_fusion(recurse): recurse must be a bool, got {recurse!r}")
    notice_once("set_comm_fusion", f"{type(cell).__name__}.set_comm_fusion({fusion_type}): graphpar does not group "
                                   "gradient reductions by fusion index; XLA's all-reduce combiner merges a step's "
                                   "reductions by size (GPU threshold: XLA_FLAGS=--xla_gpu_all_reduce_combine_"
                                   "threshold_bytes=N); the execute dump shows the collectives it compiled")
