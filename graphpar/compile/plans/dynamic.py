"""Tracing a network for a dynamic-shape signature (``Cell.set_inputs``, ``Tensor(shape=[None, 64])``).

The signature is traced twice:

* with JAX's shape polymorphism (each dynamic dimension a symbol, ``jax.export.symbolic_shape``): this proves
  ``construct`` holds for every size (an op that needs a dynamic size as a Python int fails here, named), and it
  tells, for every op's every input, which dimensions depend on a dynamic one (a symbolic size): what MindSpore's
  per-op ``CheckStrategyForDynamicShape`` reads (``graphpar.planner.dynamic_rules``);
* with a stand-in size for every dynamic dimension, which the planner plans (its rules, cost model and search
  read sizes): :data:`standin_size` is a multiple of ``device_num``, so every split a strategy can give divides
  it, which is MindSpore's rule for a dynamic dimension (its divisibility is not checked at compile time; each
  call's size must divide by the split, checked when that call compiles its concrete shape). The stand-in
  weighs AUTO_PARALLEL's cost model as that many rows. A ``Symbol`` dimension is planned at a size its Symbol
  admits that the splits divide only as the Symbol says (``placeholder.standin_avals``), and what divides each
  op's dimension derived from one is read off the symbolic trace (:func:`_known_divisor`).

Both traces run the same ``construct``, so their op nodes correspond one to one, in order; a ``construct`` whose
ops differ between the two (Python code branching on a dynamic size) is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import math

import numpy as np

from graphpar.common.placeholder import DynamicTensor, standin_avals, symbolic_avals
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.errors import DynamicShapeError, GraphparError
from graphpar.ir.construct_errors import OpShapeError
from graphpar.ir.graph import Graph
from graphpar.planner.dynamic_rules import DynamicInputs, SymbolDivisors
from graphpar.planner.strategy_file import RecordedStrategy, StrategyFile, node_keys


def standin_size(device_num: int) -> int:
    """The size a dynamic dimension is planned at: ``device_num`` x 16 (every split divides it, and so do the
    halves and quarters a reshape or a pool may take of it)."""
    return device_num * 16


def _dynamic_positions(shape: Sequence[Any]) -> tuple[int, ...]:
    return tuple(i for i, d in enumerate(shape) if not isinstance(d, (int, np.integer)))


def _known_divisor(dim: Any, device_num: int) -> int:
    """What is known to divide a symbolic dimension derived from a ``Symbol`` (``8*sym0``: 8; ``8*sym0 + 1``: 1):
    the largest divisor of ``device_num`` (every split a strategy gives divides it) that JAX's shape polymorphism
    proves divides it, as MindSpore's real divisor (``gcd(divisor, remainder)``, carried through its symbolic
    shape inference) as far as a split can tell."""
    out = 1
    for g in (g for g in range(2, device_num + 1) if device_num % g == 0):
        try:
            if (dim % g) == 0:
                out = math.lcm(out, g)
        except Exception:  # an expression JAX cannot decide (a product of symbols modulo g): nothing known
            continue
    return out


def _symbol_divisors(shape: Sequence[Any], device_num: int) -> tuple[tuple[int, int], ...]:
    """(position, known divisor) of each dimension of ``shape`` that a ``Symbol`` constrains (its symbols are
    named ``sym...``, ``placeholder.symbolic_avals``); a plain dynamic dimension keeps the base rule."""
    return tuple((i, _known_divisor(d, device_num)) for i, d in enumerate(shape)
                 if not isinstance(d, (int, np.integer)) and "sym" in str(d))


def _symbolic_trace(ns: NetworkState, inputs: Sequence[Any], purpose: str,
                    split: Callable[[Sequence[Any]], tuple[list, Any]], shapes: list) -> Graph:
    """The trace with every dynamic dimension its own symbol (MindSpore's independent ``-1``), or, where the network
    needs two of them equal (a loss subtracting the label of the batch from the output), one symbol per dimension
    position (``placeholder.symbolic_avals``)."""
    first = None
    for shared in (False, True):
        avals, call = split(symbolic_avals(inputs, shared))
        try:
            return trace_network(ns, avals, purpose, call=call)[0]
        except GraphparError as e:
            if not isinstance(e, OpShapeError):
                raise  # graphpar's own named errors (a bad strategy, a bad Cell) as they are
            first = first or e  # shapes that do not fit: two dynamic sizes the network needs equal, or a user's
        except Exception as e:  # JAX's shape polymorphism refusing an op (a dynamic size used as an int, ...)
            first = first or e
    raise DynamicShapeError(shapes, f"{type(ns.network).__name__}.construct cannot be traced for every size of its "
                            f"dynamic dimensions ({type(first).__name__}: {str(first).splitlines()[0]}); give those "
                            "dimensions their sizes in set_inputs, or use the size only in ops (no Python int of "
                            "it)") from first


def trace_signature(ns: NetworkState, inputs: Sequence[Any], purpose: str, device_num: int,
                    split: Callable[[Sequence[Any]], tuple[list, Any]]
                    ) -> tuple[Graph, DynamicInputs, SymbolDivisors]:
    """The stand-in graph of ``inputs`` (placeholders among them) and, per op node of it, its inputs' dynamic
    dimensions and the known divisors of those a ``Symbol`` constrains. ``split(inputs)`` gives the avals and the
    network call (``op_strategies._split_inputs``)."""
    shapes = [list(x.shape) for x in inputs if isinstance(x, DynamicTensor)]
    symbolic = _symbolic_trace(ns, inputs, purpose, split, shapes)
    avals, call = split(standin_avals(inputs, standin_size(device_num), device_num))
    graph, _ = trace_network(ns, avals, purpose, call=call)
    ops = [n for n in symbolic.node_list() if n.is_op]
    planned = [n for n in graph.node_list() if n.is_op]
    if [(n.kind, n.scope, n.instance_name) for n in ops] != [(n.kind, n.scope, n.instance_name) for n in planned]:
        raise DynamicShapeError(shapes, f"{type(ns.network).__name__}.construct runs other ops for other sizes of "
                                "its dynamic dimensions (Python code branching on a size), so no one plan holds "
                                "them all; give those dimensions their sizes in set_inputs")
    marks = {mine.id: tuple(_dynamic_positions(symbolic.values[v].shape) for v in sym.inputs)
             for sym, mine in zip(ops, planned)}
    divisors = {mine.id: tuple(_symbol_divisors(symbolic.values[v].shape, device_num) for v in sym.inputs)
                for sym, mine in zip(ops, planned)}
    return graph, marks, divisors


def signature_label(cell: Any, signature: Sequence[Any]) -> str:
    """``Net.set_inputs([-1, 64], [64, 64])``: the signature, as errors name it."""
    shapes = ", ".join(str(list(x.shape)) if isinstance(x, DynamicTensor) else repr(x) for x in signature)
    return f"{type(cell).__name__}.set_inputs({shapes})"


def signature_record(graph: Graph, label: str, device_num: int) -> StrategyFile:
    """The op strategies of ``graph`` (a signature's plan) as a record to force on each concrete shape the network
    is called with (``apply_strategy_file``): every call runs the signature's strategies, as MindSpore's one
    compile of the signature does; a call whose size a split does not divide is refused there, by name."""
    strategies = {}
    for node_id, key in node_keys(graph).items():
        node = graph.nodes[node_id]
        if node.strategy is None or not node.is_op:
            continue
        out = node.strategy.out_override
        out_strategy = None if out is None else tuple(tuple(graph.plan.mesh.size(axes) for axes in spec)
                                                      for spec in out)
        strategies[key] = RecordedStrategy(key, node.kind, node.instance_name, node.scope,
                                           tuple(tuple(r) for r in node.strategy.in_strategy()), out_strategy)
    return StrategyFile(label, device_num, strategies, source="the plan of",
                        fit_hint="Call with sizes that each split of a dynamic dimension divides (the signature's "
                                 "plan runs every call), or keep that dimension whole in its shard() strategy")
