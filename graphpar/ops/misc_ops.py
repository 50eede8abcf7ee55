"""Distance, box, split and selection primitives added for MindSpore parity: ``Cdist``, ``CheckValid``, ``SplitV``,
``TopK``, ``ArgMinWithValue``; ``GetNext`` refused by name (no device data queue). Sharding rules:
``graphpar.planner.rules.misc_rules``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from graphpar.errors import UnsupportedOpError
from graphpar.ops.math_ops import ArgMaxWithValue
from graphpar.ops.primitive import Primitive


class Cdist(Primitive):
    """``Cdist(p=2.0)(input_x, input_y)``: the p-norm distance between each row of ``input_x`` (B, P, M) and each
    row of ``input_y`` (B, R, M), shaped (B, P, R); 2-D inputs have no batch dimension."""

    input_names = ("input_x", "input_y")

    def __init__(self, p: float = 2.0):
        if float(p) < 0:
            raise ValueError(f"Cdist(p): p must be >= 0, got {p}")
        super().__init__(p=float(p))

    def compute(self, x, y):
        diff = jnp.abs(jnp.expand_dims(x, -2) - jnp.expand_dims(y, -3))  # (..., P, R, M)
        p = self.attrs["p"]
        if p == 0:
            return jnp.sum(diff != 0, axis=-1).astype(jnp.result_type(x))
        if p == float("inf"):
            return jnp.max(diff, axis=-1)
        if p == 2:  # the gradient at a zero distance is 0, not NaN
            sq = jnp.sum(diff * diff, axis=-1)
            safe = jnp.where(sq > 0, sq, 1)
            return jnp.where(sq > 0, jnp.sqrt(safe), 0)
        return jnp.sum(diff ** p, axis=-1) ** (1 / p)


class CheckValid(Primitive):
    """``CheckValid()(bboxes, img_metas)``: for boxes (N, 4) as ``(x0, y0, x1, y1)`` and an image
    ``(height, width, ratio)``, True where ``x0 >= 0``, ``y0 >= 0``, ``x1 <= width * ratio - 1`` and
    ``y1 <= height * ratio - 1``."""

    input_names = ("bboxes", "img_metas")

    def compute(self, bboxes, img_metas):
        height, width, ratio = img_metas[0], img_metas[1], img_metas[2]
        return ((bboxes[:, 0] >= 0) & (bboxes[:, 1] >= 0) & (bboxes[:, 2] <= width * ratio - 1)
                & (bboxes[:, 3] <= height * ratio - 1))


class SplitV(Primitive):
    """``SplitV(size_splits, split_dim, num_split)(input_x)``: ``num_split`` pieces along ``split_dim`` of the sizes
    ``size_splits`` (one entry may be -1: the rest of the dimension)."""

    def __init__(self, size_splits: Any, split_dim: int, num_split: int):
        sizes = tuple(int(s) for s in size_splits)
        if len(sizes) != num_split:
            raise ValueError(f"SplitV: size_splits {sizes} must have num_split ({num_split}) entries")
        if sum(s == -1 for s in sizes) > 1 or any(s < -1 for s in sizes):
            raise ValueError(f"SplitV: size_splits {sizes} may hold one -1 and otherwise sizes >= 0")
        super().__init__(size_splits=sizes, split_dim=int(split_dim), num_split=int(num_split))

    def compute(self, x):
        axis = self.attrs["split_dim"] % jnp.ndim(x)
        sizes = list(self.attrs["size_splits"])
        if -1 in sizes:
            sizes[sizes.index(-1)] = jnp.shape(x)[axis] - (sum(sizes) + 1)
        if sum(sizes) != jnp.shape(x)[axis] or min(sizes) < 0:
            raise ValueError(f"SplitV '{self.instance_name}': size_splits {self.attrs['size_splits']} do not add "
                             f"up to dimension {axis} of size {jnp.shape(x)[axis]}")
        bounds = [sum(sizes[:i]) for i in range(1, len(sizes))]
        return tuple(jnp.split(x, bounds, axis=axis))


class TopK(Primitive):
    """``TopK(sorted=True)(input_x, k)`` → ``(values, indices)``: the ``k`` largest entries along the last
    dimension (always in descending order here; ``sorted=False`` allows any order, and descending is one)."""

    def __init__(self, sorted: bool = True):  # noqa: A002 (MindSpore's argument name)
        super().__init__(sorted=bool(sorted))

    def compute(self, x, k):
        values, indices = jax.lax.top_k(x, int(k))
        return values, indices.astype(jnp.int32)


class ArgMinWithValue(ArgMaxWithValue):
    """``ArgMinWithValue(axis=0, keep_dims=False)(x)`` → ``(index, value)`` of the minimum along ``axis``."""

    def compute(self, x):
        axis, keep = self.attrs["axis"], self.attrs["keep_dims"]
        return (jnp.argmin(x, axis=axis, keepdims=keep).astype(jnp.int32), jnp.min(x, axis=axis, keepdims=keep))


class _VirtualDataset(Primitive):
    """MindSpore's ``_VirtualDataset()(*inputs)``, the op its planner puts after the dataset to hold the dataset
    strategy. graphpar's planner reads ``dataset_strategy`` at the network's inputs itself
    (``planner/passes/propagate.py``), so this is the identity on its inputs and records no op."""

    def __call__(self, *inputs: Any) -> Any:
        return inputs[0] if len(inputs) == 1 else tuple(inputs)


class IOU(Primitive):
    """``IOU(mode='iou')(anchor_boxes, gt_boxes)`` → (M, N): for boxes ``(x0, y0, x1, y1)`` in pixel coordinates
    (MindSpore's kernels count a box's width as ``x1 - x0 + 1``), the overlap of each ground-truth box (row) and
    each anchor (column) over their union (``'iou'``) or over the ground-truth box's area (``'iof'``)."""

    input_names = ("anchor_boxes", "gt_boxes")

    def __init__(self, mode: str = "iou"):
        if mode not in ("iou", "iof"):
            raise KeyError(f"IOU(mode): mode must be 'iou' or 'iof', got {mode!r}")
        super().__init__(mode=mode)

    def compute(self, anchor_boxes, gt_boxes):
        a, g = anchor_boxes[None, :, :], gt_boxes[:, None, :]  # (1, N, 4), (M, 1, 4)
        width = jnp.maximum(0, jnp.minimum(a[..., 2], g[..., 2]) - jnp.maximum(a[..., 0], g[..., 0]) + 1)
        height = jnp.maximum(0, jnp.minimum(a[..., 3], g[..., 3]) - jnp.maximum(a[..., 1], g[..., 1]) + 1)
        overlap = width * height
        area_a = (a[..., 2] - a[..., 0] + 1) * (a[..., 3] - a[..., 1] + 1)
        area_g = (g[..., 2] - g[..., 0] + 1) * (g[..., 3] - g[..., 1] + 1)
        if self.attrs["mode"] == "iof":
            return overlap / (area_g + 1e-10)
        return overlap / (area_a + area_g - overlap + 1e-10)


class GetNext(Primitive):
    """MindSpore's ``GetNext(types, shapes, output_num, shared_name)()``: the next batch of the device data queue
    ``shared_name``, which MindSpore's dataset sink fills. A JAX mesh has no device queue for a network to read:
    graphpar's sink feeds the batch as the compiled step's inputs (``Model.train(..., dataset_sink_mode=True)`` runs
    ``sink_size`` steps per device call), laid out by ``dataset_strategy`` as MindSpore lays out GetNext's outputs.
    So the op is refused by name when it is built, saying to take the batch as ``construct``'s arguments."""

    def __init__(self, types: Any, shapes: Any, output_num: int, shared_name: str):
        raise UnsupportedOpError(
            "GetNext", f"reads the device data queue {shared_name!r}, which graphpar does not have (no dataset "
            "sink fills a queue on a JAX mesh). Take the batch as the network's inputs instead, "
            "construct(self, data, label), and feed it: Model.train(epoch, dataset, dataset_sink_mode=True), or "
            f"_cell_graph_executor.compile(net, *batch) with Tensors of shapes {list(map(list, shapes))}; "
            "dataset_strategy lays them out as MindSpore lays out GetNext's outputs")
