"""Which dynamic dimensions an op's strategy may split: MindSpore's ``CheckStrategyForDynamicShape``, per op.

A network compiled for a signature with dynamic dimensions (``Cell.set_inputs``, ``Tensor(shape=[None, 64])``) is
planned once for every size those dimensions take. MindSpore's rule, op by op (``OperatorInfo`` and its
overrides in ``frontend/parallel/ops_info``): an op may split a dynamic dimension like a static one (the base
rule; the split must then divide the size each call brings, checked when that call compiles), except where its
implementation needs the size at compile time:

* ``Gather`` / ``SparseGatherV2`` (``GatherInfo``): the table's gathered axis, when dynamic, cannot be split (each
  device's share of the rows, and the offset its lookups subtract, are sizes);
* ``GatherD`` (``GatherDInfo``): ``x``'s ``dim`` axis, when dynamic, cannot be split;
* ``CropAndResize``: the images' batch dimension 0, when dynamic, cannot be split;
* ``BroadcastTo``: no dynamic dimension at all (``BroadcastToInfo`` refuses dynamic shapes);
* ``LinSpace``: its output cannot be split when dynamic;
* the window ops ``Conv2D``, ``Conv3D``, ``AvgPool3D``, ``MaxPool3D``: with any dynamic input dimension, no spatial
  split that needs the neighbours' rows (a halo exchange: a window larger than its stride, ``pad_mode`` other than
  ``valid``), whose sizes MindSpore computes when compiling;
* ``FlashAttentionScore``, ``ResizeBilinearV2``, ``UniformReal``, ``SparseSoftmaxCrossEntropyWithLogits``,
  ``CheckValid``: MindSpore has a rule of its own for them (``FlashAttentionScoreInfo``, ``ResizeBilinearV2Info``,
  ``RandomDistributeInfo``, ``BatchParallelInfo``) that graphpar does not reproduce: a split while an input is
  dynamic is refused by name rather than accepted on a guess.

Two rules hold for every op with a dynamic input (``frontend/parallel/dynamic_shape``): a dimension given a
``Symbol`` (``Tensor(shape=[Symbol(divisor=8), 64])``, or derived from one) may be split only into parts that divide
what the Symbol makes divide it (MindSpore checks strategies against these divisor shapes), and a ``shard()``
Layout may not split a dimension over several axes nor use ``interleaved_parallel``
(``CheckLayoutFormatForDynamicShape``); :func:`check_dynamic_hints` applies them to the ``shard()`` hints before
planning. :func:`check_dynamic_strategies` applies the per-op rules to a planned graph; a refusal is a
:class:`~graphpar.errors.DynamicStrategyError` (a ``StrategyError``, so the ``RuntimeError`` MindSpore raises).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from graphpar.errors import DynamicStrategyError
from graphpar.ir.graph import Graph, Node
from graphpar.planner.layout import INTERLEAVED, is_layout_strategy

# node id -> per input, the positions of its dynamic dimensions
DynamicInputs = Mapping[int, tuple[tuple[int, ...], ...]]
# node id -> per input, (position, known divisor) of each dimension a ``Symbol`` constrains
SymbolDivisors = Mapping[int, tuple[tuple[tuple[int, int], ...], ...]]
# (node, its input strategy, its inputs' dynamic dimensions) -> why the strategy cannot hold, or None
_Rule = Callable[[Node, Graph, tuple, tuple], str | None]


def _gather(node: Node, graph: Graph, rows: tuple, dynamic: tuple) -> str | None:
    rank = len(graph.values[node.inputs[0]].shape)
    axis = node.static_args.get(2, 0) % rank
    if axis in dynamic[0] and rows[0][axis] != 1:
        return (f"the table's dimension {axis} (the gathered axis) is dynamic and split {rows[0][axis]} ways: a "
                "dynamic gathered axis cannot be split")
    return None


def _gather_d(node: Node, graph: Graph, rows: tuple, dynamic: tuple) -> str | None:
    dim = int(node.static_args.get(1, 0)) % len(graph.values[node.inputs[0]].shape)
    if dim in dynamic[0] and rows[0][dim] != 1:
        return (f"x's dimension {dim} (the gathered dim) is dynamic and split {rows[0][dim]} ways: a dynamic "
                "gathered dim cannot be split")
    return None


def _not_reproduced(node: Node, graph: Graph, rows: tuple, dynamic: tuple) -> str | None:
    if any(dynamic) and any(s != 1 for row in rows for s in row):
        return (f"MindSpore checks {node.kind}'s strategy against dynamic shapes with a rule of its own, which "
                f"graphpar does not reproduce (dynamic: {[list(d) for d in dynamic]})")
    return None


def _crop_and_resize(node: Node, graph: Graph, rows: tuple, dynamic: tuple) -> str | None:
    if 0 in dynamic[0] and rows[0][0] != 1:
        return f"the images' dimension 0 is dynamic and split {rows[0][0]} ways: it cannot be split when dynamic"
    return None


def _no_dynamic(node: Node, graph: Graph, rows: tuple, dynamic: tuple) -> str | None:
    if any(dynamic):
        return f"{node.kind} takes no dynamic dimension (dynamic: {[list(d) for d in dynamic]})"
    return None


def _lin_space(node: Node, graph: Graph, rows: tuple, dynamic: tuple) -> str | None:
    if any(dynamic) and any(s != 1 for row in rows for s in row):
        return "LinSpace's output cannot be split when its shape is dynamic"
    return None


def _spatial(value: object, n: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    values = tuple(int(v) for v in value)  # type: ignore[union-attr]
    return values[-n:] if len(values) >= n else values * n


def _window(node: Node, graph: Graph, rows: tuple, dynamic: tuple) -> str | None:
    if not any(dynamic) or str(node.attrs.get("pad_mode", "valid")).lower() == "valid":
        return None
    n = len(graph.values[node.inputs[0]].shape) - 2
    kernel = _spatial(node.attrs.get("kernel_size", 1), n)
    dilation = _spatial(node.attrs.get("dilation", 1), n)
    stride = _spatial(node.attrs.get("strides", node.attrs.get("stride", 1)), n)
    for j in range(n):
        if rows[0][2 + j] > 1 and (kernel[j] - 1) * dilation[j] + 1 > stride[j]:
            return (f"its input's spatial dimension {2 + j} is split {rows[0][2 + j]} ways with a window larger than "
                    "its stride, which needs the neighbours' rows (a halo exchange): not with a dynamic shape "
                    f"(dynamic: {[list(d) for d in dynamic]})")
    return None


_RULES: dict[str, _Rule] = {"GatherD": _gather_d, "FlashAttentionScore": _not_reproduced,
                            "ResizeBilinearV2": _not_reproduced, "UniformReal": _not_reproduced,
                            "SparseSoftmaxCrossEntropyWithLogits": _not_reproduced, "CheckValid": _not_reproduced,
                            "Conv2D": _window, "Conv3D": _window, "AvgPool3D": _window, "MaxPool3D": _window,
                            "Gather": _gather, "SparseGatherV2": _gather, "CropAndResize": _crop_and_resize,
                            "BroadcastTo": _no_dynamic, "LinSpace": _lin_space}


def _symbol_split(rows: tuple, divisors: tuple) -> str | None:
    for i, dims in enumerate(divisors):
        for pos, known in dims:
            if i < len(rows) and pos < len(rows[i]) and known % rows[i][pos]:
                return (f"input {i}'s dimension {pos} is dynamic with a Symbol that makes it a multiple of {known}, "
                        f"which a split of {rows[i][pos]} does not divide")
    return None


def _layout_format(layouts: tuple) -> str | None:
    for i, layout in enumerate(layouts):
        for d, entry in enumerate(layout.entries or ()):
            if INTERLEAVED in entry:
                return (f"input {i}'s layout uses interleaved_parallel (dimension {d}), which MindSpore does not "
                        "take with a dynamic shape")
            if len(entry) > 1:
                return (f"input {i}'s layout splits its dimension {d} over several axes {entry}, which MindSpore "
                        "does not take with a dynamic shape")
    return None


def check_dynamic_hints(graph: Graph, dynamic_inputs: DynamicInputs, divisors: SymbolDivisors) -> None:
    """Before planning, the ``shard()`` hints of ops with a dynamic input, as MindSpore checks them
    (``CheckLayoutForDynamicShape``): a Layout may not split a dimension over several axes nor use
    ``interleaved_parallel``; a strategy (tuple or Layout) may not split a ``Symbol`` dimension into parts that do
    not divide it (``divisors``), named by the Symbol rather than by the stand-in size the planner plans.
    :class:`DynamicStrategyError` otherwise."""
    for node in graph.node_list():
        hint, dynamic = node.hint, dynamic_inputs.get(node.id)
        if hint is None or not dynamic or not any(dynamic):
            continue
        if is_layout_strategy(hint):
            reason = _layout_format(hint)
            rows = [[math.prod(lay.size(a) for a in e if a != INTERLEAVED) for e in (lay.entries or ())]
                    for lay in hint]
        elif isinstance(hint, tuple) and all(isinstance(r, tuple) and all(isinstance(v, int) for v in r)
                                             for r in hint):
            reason, rows = None, [list(r) for r in hint]
        else:
            continue
        reason = reason or _symbol_split(tuple(tuple(r) for r in rows), divisors.get(node.id, ()))
        if reason is not None:
            hint_text = ("Split it into parts that divide that multiple (or give a Symbol whose divisor the split "
                         "divides)" if "a Symbol" in reason else
                         "Give each dimension one alias at most, without interleaved_parallel")
            raise DynamicStrategyError(node.instance_name, rows, reason, scope=node.scope, hint=hint_text)


def check_dynamic_strategies(graph: Graph, dynamic_inputs: DynamicInputs,
                             divisors: SymbolDivisors | None = None) -> None:
    """Raise :class:`DynamicStrategyError` for the first op (graph order) whose strategy splits a dynamic dimension
    its MindSpore rule forbids (module docstring), or splits a ``Symbol`` dimension into parts that do not divide
    what the Symbol makes divide it (``divisors``; MindSpore checks a dynamic op's strategy against these divisor
    shapes, ``OperatorInfo::DivisorsReplaceShapes``); every other split of a dynamic dimension holds."""
    for node in graph.node_list():
        dynamic = dynamic_inputs.get(node.id)
        if node.strategy is None or not dynamic or not any(dynamic):
            continue
        rows = node.strategy.in_strategy()
        rule = _RULES.get(node.kind)
        reason = _symbol_split(rows, (divisors or {}).get(node.id, ()))
        if reason is None and rule is not None:
            reason = rule(node, graph, rows, dynamic)
        if reason is not None:
            hint = ("Split it into parts that divide that multiple (or give a Symbol whose divisor the split "
                    "divides)" if "a Symbol" in reason else
                    "Keep that dimension whole (split 1), or give the dynamic dimensions their sizes in set_inputs")
            raise DynamicStrategyError(node.instance_name, [list(r) for r in rows], reason, scope=node.scope,
                                       hint=hint)
