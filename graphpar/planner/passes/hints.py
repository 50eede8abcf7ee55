"""Passes ``read_hints`` and ``apply_hints``: each user ``shard()`` hint read once, then placed on the chosen mesh
as a validated strategy (provenance: user).

``read_hints`` (the first pass of the SEMI_AUTO / AUTO / HYBRID lists) reads: node hints and ``out_strategy``,
shapes, the op rules, the request's device count. Adds: ``graph.plan.hints`` (node id -> a :class:`ReadHint`): the
hint's device matrix with its repeat dimension (what ``choose_mesh`` expresses) and the outcome of MindSpore's
``CheckStrategy`` (``strategy.check_hint``), which needs the device count but not the mesh's axes. It raises
nothing: a hint that fails its checks is recorded as a :class:`RefusedHint` and ``apply_hints`` raises its error,
so errors come where and in the order they always came (after ``choose_mesh`` and ``dataset_layouts``, in node
order, beside the errors that need the mesh).

``apply_hints`` reads: ``graph.plan.hints``, shapes, the mesh (never ``node.hint``). Adds: ``strategy`` and
``provenance`` on hinted nodes. Errors: a :class:`~graphpar.errors.StrategyError` for a hint that cannot hold (wrong
rank, a split that does not divide its dimension, a product above the device count, contracted splits that
disagree, a dimension the op cannot split, a split that does not fit the mesh's axes, an ``out_strategy`` that
cannot hold). A hint on an op kind without a sharding rule is an error too: graphpar will not silently replicate it.
A hint on an op whose layout follows its input (``Reshape``, ``graphpar.planner.follow``) is ignored with a one-time
warning, as MindSpore ignores it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from graphpar._context import ParallelMode
from graphpar.errors import StrategyError
from graphpar.ir.graph import Graph, Node, Provenance
from graphpar.planner.dims import shapes_of
from graphpar.planner.follow import follows_input, ignore_hint
from graphpar.planner.layout import is_layout_strategy
from graphpar.planner.layout_hint import LayoutHint, check_layout_hint, place_layout_hint
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.strategy import check_hint, hint_device_matrix, place_hint, strategy_text


@dataclass(frozen=True)
class ReadHint:
    """One op's ``shard()`` hint as ``read_hints`` read it, independent of the mesh. ``text``: MindSpore's printing
    of the hint (for messages); ``device_matrix``: the matrix it asks for with its repeat dimension, None when it
    does not fit the op's rule or the device count (``choose_mesh`` then leaves it out)."""

    text: str
    device_matrix: tuple[int, ...] | None


@dataclass(frozen=True)
class CheckedHint(ReadHint):
    """A hint that passed the checks: its entries for the tensor inputs (scalar operands' ``()`` dropped), the
    split of each label split more than once, and the op's ``out_strategy`` (None: none given)."""

    in_strategy: tuple[tuple[int, ...], ...]
    splits: tuple[tuple[str, int], ...]
    out_strategy: tuple | None


@dataclass(frozen=True)
class CheckedLayoutHint(ReadHint):
    """A hint written with ``Layout`` objects that passed the checks (``planner.layout_hint``): ``device_matrix``
    is the layout's own (its device axes), which the mesh must refine."""

    layout: LayoutHint


@dataclass(frozen=True)
class RefusedHint(ReadHint):
    """A hint that failed its checks, or sits on an op kind without a sharding rule: ``apply_hints`` raises
    ``error`` at the node's turn."""

    error: StrategyError


@dataclass(frozen=True)
class IgnoredHint(ReadHint):
    """A hint on an op whose layout follows its input: ``apply_hints`` warns once and ignores it."""


def read_hint(node: Node, graph: Graph, ctx: PlanContext) -> ReadHint:
    """What ``read_hints`` records for one hinted node (see the module docstring)."""
    hint, text = node.hint, strategy_text(node.hint)
    hint = _pcl_matmul(node, hint, ctx.request.devices) or hint
    dims = ctx.dims(node, graph)
    if is_layout_strategy(hint) and not follows_input(node) and dims is not None:
        ins, outs = shapes_of(node, graph)
        try:
            params = frozenset(k for k, vid in enumerate(node.inputs) if graph.values[vid].kind == "param")
            checked = check_layout_hint(node, dims, hint, node.out_hint, ins, outs, ctx.request.devices, params)
        except StrategyError as error:
            return RefusedHint(text, None, error)
        return CheckedLayoutHint(text, checked.device_matrix, checked)
    matrix = None if dims is None or is_layout_strategy(hint) else hint_device_matrix(dims, hint,
                                                                                           ctx.request.devices)
    if follows_input(node):
        return IgnoredHint(text, matrix)
    if dims is None:
        return RefusedHint(text, matrix, StrategyError(
            node.instance_name, hint, f"graphpar has no sharding rule for {node.kind}", node.scope,
            "Remove the shard() call; the op will be replicated"))
    ins, _ = shapes_of(node, graph)
    try:
        in_strategy, splits = check_hint(node, dims, hint, ins, ctx.request.devices)
    except StrategyError as error:
        return RefusedHint(text, matrix, error)
    used = math.prod(splits.values())
    if _fully_use_checked(ctx) and used not in (1, ctx.request.devices):
        # MindSpore's CheckStrategyUsedDevices (set_algo_parameters(fully_use_devices=True), AUTO_PARALLEL)
        return RefusedHint(text, matrix, StrategyError(
            node.instance_name, hint, f"set_algo_parameters(fully_use_devices=True) but the strategy uses {used} of "
            f"the {ctx.request.devices} devices", node.scope,
            "Use every device (or none: all ones), or call set_algo_parameters(fully_use_devices=False)"))
    return CheckedHint(text, matrix, in_strategy, tuple(splits.items()), node.out_hint)


def _pcl_matmul(node: Node, hint, devices: int) -> tuple | None:
    """MindSpore's "PCL MatMul" (``MatMulInfo::CheckPCLMatMul``): a 2-D ``MatMul`` without transposes whose two
    inputs both have the strategy ``(a, b)`` with ``a * b`` the device count. ``x`` (m, k) arrives split (a, b) and
    ``w`` (k, n) split (a, b); MindSpore all-gathers ``x``'s k over the b devices and ``w``'s k over the a devices and
    multiplies, so the output is split (a, b) without a reduction: the op's strategy ``((a, 1), (1, b))``, reached by
    the redistribution of each input. None for any other hint (under the ordinary rule such a hint is invalid
    unless ``a == b == 1``)."""
    if (node.kind != "MatMul" or is_layout_strategy(hint) or not isinstance(hint, tuple) or len(hint) != 2
            or node.attrs.get("transpose_a") or node.attrs.get("transpose_b")):
        return None
    x, w = hint
    if x != w or len(x) != 2 or math.prod(x) != devices or x == (1, 1):
        return None
    return ((x[0], 1), (1, x[1]))


def _fully_use_checked(ctx: PlanContext) -> bool:
    """Whether user strategies must use every device: fully_use_devices under AUTO_PARALLEL's propagation and
    dynamic programming (recursive programming reads no user strategy check, as in MindSpore)."""
    return (ctx.request.algo.fully_use_devices and ctx.mode == ParallelMode.AUTO_PARALLEL
            and ctx.search_mode != "recursive_programming")


def read_hints(graph: Graph, ctx: PlanContext) -> Graph:
    return graph.with_plan(hints={node.id: read_hint(node, graph, ctx) for node in graph.node_list()
                                  if node.hint is not None})


def apply_hints(graph: Graph, ctx: PlanContext) -> Graph:
    updates = {}
    for node in graph.node_list():
        read = graph.plan.hints.get(node.id)
        if read is None:
            continue
        if isinstance(read, IgnoredHint):
            ignore_hint(node, read.text)
            continue
        if isinstance(read, RefusedHint):
            raise read.error
        dims = ctx.dims(node, graph)
        if isinstance(read, CheckedLayoutHint):
            updates[node.id] = {"strategy": place_layout_hint(dims, read.layout, ctx.mesh),
                                "provenance": Provenance("user")}
            continue
        _, outs = shapes_of(node, graph)
        strategy = place_hint(node, dims, read.in_strategy, dict(read.splits), ctx.mesh, read.out_strategy, outs)
        updates[node.id] = {"strategy": strategy, "provenance": Provenance("user")}
    return graph.with_annotations(updates)
