"""Each op's strategy, named as MindSpore names it, and plans made for that without devices.

MindSpore's unit tests read a compiled network's strategies as ``{"Default/network-Net/MatMul-op0": [[2, 4], [4,
1]], ...}`` (``_cell_graph_executor._get_shard_strategy(net)``) and look ops up by kind and number
(``re.search("MatMul-op0", key)``). :func:`strategy_table` gives a planned graph's strategies in that form: the key
is the op's Cell scope, its MindSpore kind and ``-op{n}`` numbered as MindSpore numbers it (:func:`strategy_keys`);
the value is one list of splits per tensor input (``[]`` for a scalar operand; for an op whose layout follows its
input, e.g. Reshape, the split of the layout reaching it under AUTO_PARALLEL and ``[]`` under SEMI_AUTO, as
MindSpore's ReshapeInfo). :func:`plan_cell` plans a Cell (a ``TrainOneStepCell``'s train step, any other Cell's
forward) for the devices the context names, without those devices: the trace and the pass list are the ones a real
job runs (``plan_graph``), nothing is lowered, and a configured strategy file (or
``set_op_strategy_config(mode="SAVE")``'s) and, with ``save_graphs``, rank 0's ``step_parallel_begin`` dump are
written as a compile writes them. ``device_num`` may exceed the devices this process has (said once): MindSpore's
unit tests compile for 16 or 24 devices this way; running such a network still needs them (``DeviceError``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar._logging import notice_once
from graphpar.communication.devices import all_devices
from graphpar.compile.plans import ascend_groups
from graphpar.compile.lowering.graph_trace import call_network, trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.dynamic import trace_signature
from graphpar.common.placeholder import DynamicTensor, as_avals, has_dynamic
from graphpar.compile.plans.global_batch import one_rank_to_global
from graphpar.dump.writer import PlanDescription, write_begin
from graphpar.ir.graph import Graph, Node
from graphpar.ir.walk_order import output_first_order
from graphpar.nn.wrap import TrainOneStepCell
from graphpar.planner import strategy_file
from graphpar.planner.dynamic_rules import check_dynamic_hints, check_dynamic_strategies
from graphpar.planner.follow import follows_input, is_pass_through
from graphpar.planner.memory_model import graph_optimizer_slots
from graphpar.planner.passes.context import PlanRequest
from graphpar.planner.planning import plan_graph
from graphpar.planner.search.settings import search_settings

_PLANNED_MODES = (ParallelMode.SEMI_AUTO_PARALLEL, ParallelMode.AUTO_PARALLEL, ParallelMode.HYBRID_PARALLEL)


def _mindspore_scope(scope: str, top: str | None) -> str:
    """graphpar labels the Cell a forward is traced from ``network-{Class}`` under ``Default``; MindSpore compiles
    that Cell as the root itself, ``Default``."""
    if top is None:
        return scope
    root = f"Default/network-{top}"
    if scope == root or scope.startswith(root + "/"):
        return "Default" + scope[len(root):]
    return scope


def strategy_keys(graph: Graph, top: str | None = None) -> dict[int, str]:
    """Node id -> ``"{scope}/{Kind}-op{n}"`` for every op node, as MindSpore names a CNode
    (``CNode::fullname_with_scope``): ``n`` counts the nodes of the same scope and kind named before it
    (``id_generator::get_id`` keeps one counter per ``"{scope}/{Kind}"``), in the order of MindSpore's parallel
    pass's walk (:func:`~graphpar.ir.walk_order.output_first_order`; the dict is in that order), the order its
    tests' numbers follow: in ``x -> Add -> MatMul -> Add`` the last Add is ``Add-op0``, the first ``Add-op1``.
    ``top``: the class of the Cell a forward graph was traced from (its scope is MindSpore's root, ``Default``). In
    a train step, or a construct that takes a gradient, MindSpore's walk passes through its own backward graph,
    which graphpar does not build (JAX derives the backward): there the numbers can differ from MindSpore's."""
    counts: dict[str, int] = {}
    keys = {}
    for node in output_first_order(graph):
        if not node.is_op:
            continue
        scope = _mindspore_scope(node.scope, top)
        name = f"{scope}/{node.kind}" if scope else node.kind
        keys[node.id] = f"{name}-op{counts.get(name, 0)}"
        counts[name] = counts.get(name, 0) + 1
    return keys


def strategy_table(graph: Graph, top: str | None = None) -> dict[str, list[list[int]]]:
    """Each op's strategy keyed as MindSpore's tests and strategy files key it (see the module docstring), in the
    order MindSpore's ``GetCNodeStrategy`` lists them (its walk from the output: a test that stops at the first
    ``Reshape-op`` key reads the last Reshape); ``top`` as :func:`strategy_keys`."""
    table = {}
    for nid, key in strategy_keys(graph, top).items():
        node = graph.nodes[nid]
        if node.strategy is None or is_pass_through(node):
            continue  # a Depend is no op of MindSpore's plan: its strategies list none
        if follows_input(node):
            # MindSpore's ReshapeInfo: AUTO_PARALLEL's cost model gives it the split of the layout that reaches
            # it (step_auto_parallel selects it like any op's); SEMI_AUTO never sets one
            table[key] = [list(node.strategy.in_strategy()[0])] if graph.plan.parallel_mode == \
                ParallelMode.AUTO_PARALLEL else []
            continue
        table[key] = [list(row) for row in node.strategy.in_strategy()]
    return table


def _aval(x: Any) -> jax.ShapeDtypeStruct:
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    return jax.ShapeDtypeStruct(tuple(x.shape), np.dtype(x.dtype))


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.ShapeDtypeStruct, jax.Array, np.ndarray, np.generic))


def _split_inputs(inputs: Sequence[Any]) -> tuple[list[jax.ShapeDtypeStruct], Any]:
    """The array leaves of ``inputs`` as avals, and the call that puts the other leaves back as constants: in
    MindSpore's graph mode a Python number or tuple passed to ``construct`` (``compile(net, x, (-1, 32))``) is a
    compile-time constant, as in a forward call (``compile.runtime.forward``)."""
    leaves, treedef = jax.tree.flatten(tuple(inputs))
    statics = {i: leaf for i, leaf in enumerate(leaves) if not _is_array(leaf)}

    def call(model: Any, xs: Sequence[Any]) -> Any:
        it = iter(xs)
        args = jax.tree.unflatten(treedef, [statics[i] if i in statics else next(it)
                                            for i in range(treedef.num_leaves)])
        return call_network(model, args)

    return [_aval(x) for i, x in enumerate(leaves) if i not in statics], call


def table_of_cell(cell: Any, inputs: Sequence[Any]) -> dict[str, list[list[int]]]:
    """:func:`strategy_table` of :func:`plan_cell` (empty when nothing is planned), scopes as MindSpore names them
    for ``cell`` compiled at the root."""
    graph = plan_cell(cell, inputs)
    if graph is None:
        return {}
    return strategy_table(graph, None if isinstance(cell, TrainOneStepCell) else type(cell).__name__)


def _stacking(shape: Sequence[int], index: int, devices: int) -> tuple[int, ...]:
    """Per dimension, how many ranks' parts input ``index`` stacks into its global shape (``one_rank_to_global``)."""
    ones = tuple(max(n, 1) for n in shape)
    return tuple(g // n for g, n in zip(one_rank_to_global(ones, index, devices), ones))


def plan_cell(cell: Any, inputs: Sequence[Any], one_rank: bool = False, devices: int | None = None,
              record: bool = True) -> Graph | None:
    """``cell`` traced for ``inputs`` and planned under the context in force, for its ``device_num`` devices
    (virtual: none is used); None in STAND_ALONE / DATA_PARALLEL, which plan no op. ``inputs`` are global shapes
    (the process's data, as graphpar's own calls take them), or with ``one_rank`` one rank's part, as MindSpore's
    per-rank ``_cell_graph_executor.compile`` takes them (``global_batch.one_rank_to_global``). Placeholders with
    dynamic dimensions among ``inputs`` plan that signature (``compile.plans.dynamic``). ``devices``: plan for
    that many (default the context's ``device_num``); ``record=False``: a plan for a plan (a signature's, forced on
    a call's), which writes no strategy file or dump of its own."""
    pctx = _context.current_parallel()
    train = isinstance(cell, TrainOneStepCell)
    network = cell.network if train else cell
    purpose = "train" if train else "forward"
    ns = NetworkState(network, network.trainable_params())
    devices = devices or _context.get_auto_parallel_context("device_num")
    if one_rank:  # a dynamic dimension stays dynamic, its Symbol scaled by the ranks stacked in it
        memo: dict = {}
        inputs = [x.scaled(_stacking(x.shape, i, devices), memo) if isinstance(x, DynamicTensor)
                  else jax.ShapeDtypeStruct(one_rank_to_global(x.shape, i, devices), np.dtype(x.dtype))
                  if _is_array(x) else x for i, x in enumerate(inputs)]
    dynamic, divisors, inputs = None, {}, as_avals(inputs)
    if has_dynamic(inputs):  # a dynamic-shape signature: planned once for every size (compile.plans.dynamic)
        graph, dynamic, divisors = trace_signature(ns, inputs, purpose, devices, _split_inputs)
    else:
        avals, call = _split_inputs(inputs)
        graph, _ = trace_network(ns, avals, purpose, call=call)
    if pctx.parallel_mode not in _PLANNED_MODES:
        return None
    if dynamic is not None:
        check_dynamic_hints(graph, dynamic, divisors)
    optimizer = cell.optimizer if train else None
    graph = plan_graph(graph, PlanRequest(
        devices, pctx.parallel_mode, pctx.search_mode, purpose, pctx.dataset_strategy, strategy_file.for_plan(pctx),
        search_settings(pctx.parallel_mode, pctx.search_mode, _context.current().max_device_memory, "gpu",
                        _context.current_cost_model().objective_weights,
                        _context.current_cost_model().rp_matmul_mem_coef),
        graph_optimizer_slots(graph, optimizer), algo=_context.current_algo(),
        propagation_order=pctx.propagation_order))
    if dynamic is not None:
        check_dynamic_strategies(graph, dynamic, divisors)
    ascend_groups.check(graph, pctx.parallel_mode, pctx.global_rank)
    if not record:
        return graph
    strategy_file.maybe_save(graph, pctx, devices, set(ns.param_names()), parameters=network.trainable_params())
    if _context.current().save_graphs:  # the begin dump, as a job's compile writes it (rank 0: the global view)
        write_begin(graph, PlanDescription(pctx, devices), _context.current().save_graphs_path, [0])
    present = len(all_devices())
    if devices > present:
        notice_once(f"virtual-compile:{devices}:{present}",
                    f"compile-only plan (_cell_graph_executor.compile, parallel.strategies) for device_num={devices} "
                    f"without those devices (this process has {present}): strategies, parameter layouts, strategy "
                    "files and the begin dump are those of a real job; nothing is lowered (a compile-only call never "
                    "is); running the network needs the devices", logging.INFO)
    return graph
