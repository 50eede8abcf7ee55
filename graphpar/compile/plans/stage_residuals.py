"""What one repeated layer holds in a pipeline stage's programs, read from its planned trace (``stage_profile``'s
probe): the residuals a stage's forward keeps per micro-batch, the most its backward holds at once (cotangents and,
recomputed, replayed activations) and the largest parameter block (its gradient is made before it is added to the
accumulator)."""

from __future__ import annotations

from typing import Any

from graphpar.ir.graph import Graph
from graphpar.planner.cost import block_bytes, grad_values, replicated_spec
from graphpar.planner.memory_model import checkpoint_keeps_input, keeps_output, makes_weight_gradient


def stage_residuals(planned: Graph, probe: str, fold: str) -> tuple[float, float, float]:
    """Per device, what a pipeline stage's forward keeps of one layer per micro-batch: the op outputs its backward
    reads (a stage saves op outputs only: ``memory_model.checkpoint_keeps_input``), each once per layout its
    readers read it in (a Softmax's output in its own), the layer's input (the output of the Add that reads the
    Parameter named ``probe``) among them, ops scoped ``fold`` left out; that input in its layout and the layer's
    state and constant arrays (a causal mask held as a Tensor attribute: a constant of the trace, which the
    checkpoint closes over and so saves like an input) in theirs: what a recomputed layer keeps (its checkpoint's
    inputs, saved with each micro-batch's residuals; measured on a compiled MoE stage); and the part
    of the first on the gradient path, whose cotangents the backward makes. An MoE's routing masks (the one-hot
    slots of each round, the dispatch mask cast to the tokens' type) are kept in float32 (measured: a compiled
    MoE stage saves them), but no gradient flows into them."""
    grads = grad_values(planned)
    mesh, values = planned.plan.mesh, planned.values
    held: dict[tuple[int, Any], float] = {}
    state: dict[int, float] = {}
    differentiated: set[tuple[int, Any]] = set()
    first = 0.0
    for node in planned.node_list():
        if fold in node.scope.rsplit("/", 1)[-1]:
            continue
        for vid in node.inputs:
            v = values[vid]
            if v.producer is None and v.kind in ("state", "const") and v.is_array:
                state[vid] = block_bytes(v, planned.plan.value_specs.get(vid, replicated_spec(len(v.shape))), mesh)
        if any(values[v].name == probe for v in node.inputs):
            first += sum(block_bytes(values[v], node.strategy.output_spec(j), mesh)
                         for j, v in enumerate(node.outputs))
        for j, vid in enumerate(node.outputs):
            if keeps_output(node, j, planned, grads):
                spec = node.strategy.output_spec(j)
                held[(vid, spec)] = block_bytes(values[vid], spec, mesh)
                if vid in grads:
                    differentiated.add((vid, spec))
        for k, vid in enumerate(node.inputs):
            if values[vid].producer is not None and checkpoint_keeps_input(node, k, planned, grads):
                spec = node.strategy.input_spec(k)
                held[(vid, spec)] = block_bytes(values[vid], spec, mesh)
                if vid in grads:
                    differentiated.add((vid, spec))
    return sum(held.values()), first + sum(state.values()), sum(held[key] for key in differentiated)


def largest_parameter(planned: Graph, probe: str) -> float:
    """The largest parameter block on one device in its stored layout (the probe Parameter left out)."""
    specs, mesh = planned.plan.value_specs, planned.plan.mesh
    return max((block_bytes(v, specs.get(vid, replicated_spec(len(v.shape))), mesh)
                for vid, v in planned.values.items() if v.kind == "param" and v.name != probe and v.is_array),
               default=0.0)


def backward_peak(planned: Graph, probe: str, fold: str, recompute: bool) -> tuple[float, float]:
    """Per device, the most one layer's backward in a stage program holds at once besides its arguments and the
    parameters' gradients, walked on the layer's plan in reverse op order as the backward runs:

    * an op's backward reads its outputs' cotangents and makes its inputs' (a value read by several ops gets one,
      made by its last reader, freed once its producer has read it); an output whose cotangent makes a weight's
      gradient keeps it to the end (``memory_model.makes_weight_gradient``: XLA makes those products last);
    * an input cotangent the op leaves partial over the tensor group (:func:`_partial_axes`) is held as that
      partial block and its reduction until the input's producer reads the sum;
    * with ``recompute`` the layer's forward runs again first, and each block :func:`stage_residuals` keeps is
      live until the backward of its first reader (to the end when a weight's gradient reads it): from the start,
      unless its op makes it larger than the op's inputs (a one-hot mask from indices, a broadcast), which a
      memory-minimising schedule makes just before its last reader's backward reads it.

    Returns that peak and the part of it the layer still holds when its backward ends (what its weight gradients
    read: in a program of several layers, what each layer differentiated earlier holds is live too). The layer's input (the probe's Add) is where the walk ends (its cotangent is sent back);
    ops scoped ``fold`` are left out. Measured against XLA's compiled stage programs in tests/search/test_stage_moe_memory.py and
    test_stage_plan_e2e.py (docs/architecture.md, "Stage memory")."""
    grads = grad_values(planned)
    mesh, values = planned.plan.mesh, planned.values
    nodes = [n for n in planned.node_list() if fold not in n.scope.rsplit("/", 1)[-1]
             and not any(values[v].name == probe for v in n.inputs)]
    size: dict[int, float] = {}
    for node in nodes:
        for j, vid in enumerate(node.outputs):
            if vid in grads:
                size[vid] = block_bytes(values[vid], node.strategy.output_spec(j), mesh)
    made: dict[int | None, float] = {}
    freed: dict[int, float] = {}
    if recompute:
        _recomputed(planned, nodes, grads, made, freed)
    replayed = made.pop(None, 0.0)
    live: set[int] = set()
    partial: dict[int, float] = {}
    peak = replayed
    for i in range(len(nodes) - 1, -1, -1):
        node = nodes[i]
        replayed += made.get(i, 0.0)
        live.update(v for v in node.outputs if v in size)  # the layer's output: its cotangent arrives
        live.update(v for v in node.inputs if v in size)
        for k, vid in enumerate(node.inputs):
            if vid in size and mesh.size(_partial_axes(node, k)) > 1:
                partial[vid] = partial.get(vid, 0.0) + 2.0 * block_bytes(values[vid], node.strategy.input_spec(k),
                                                                         mesh)
        peak = max(peak, replayed + sum(size[v] for v in live) + sum(partial.values()))
        if not makes_weight_gradient(node, planned, grads):
            live.difference_update(node.outputs)
        for vid in node.outputs:
            partial.pop(vid, None)
        replayed -= freed.get(i, 0.0)
    return peak, replayed + sum(size[v] for v in live)


def _partial_axes(node: Any, k: int) -> tuple[str, ...]:
    """The mesh axes over which ``node``'s backward leaves input ``k``'s cotangent partial (the op's split labels
    the input lacks: a column-parallel MatMul's x): the backward holds that partial block and its reduction (an
    input read by several such ops: each one's, reduced together), until the input's producer reads the sum."""
    strategy = node.strategy
    carried = set(strategy.dims.inputs[k]) if k < len(strategy.dims.inputs) else set()
    return tuple(a for l in strategy.dims.order if l not in carried for a in strategy.axes.get(l, ()))


def _recomputed(planned: Graph, nodes: list[Any], grads: frozenset[int], made: dict[int | None, float],
                freed: dict[int, float]) -> None:
    """The blocks a recomputed layer's backward holds (:func:`backward_peak`): per walk index, the bytes made
    there (key None: at the start) and freed there (never: read by a weight's gradient, made last)."""
    mesh, values = planned.plan.mesh, planned.values
    index = {n.id: i for i, n in enumerate(nodes)}
    readers: dict[tuple[int, Any], list[int]] = {}
    held: set[tuple[int, Any]] = set()
    for i, node in enumerate(nodes):
        for j, vid in enumerate(node.outputs):
            if keeps_output(node, j, planned, grads):
                readers.setdefault((vid, node.strategy.output_spec(j)), []).append(i)
        for k, vid in enumerate(node.inputs):
            if values[vid].producer is not None and checkpoint_keeps_input(node, k, planned, grads):
                readers.setdefault((vid, node.strategy.input_spec(k)), []).append(i)
                if makes_weight_gradient(node, planned, grads):
                    held.add((vid, node.strategy.input_spec(k)))
    for (vid, spec), at in readers.items():
        nbytes = block_bytes(values[vid], spec, mesh)
        producer = planned.nodes.get(values[vid].producer)
        late = producer is not None and producer.id in index and sum(
            block_bytes(values[v], producer.strategy.input_spec(k), mesh)
            for k, v in enumerate(producer.inputs) if values[v].is_array) < nbytes
        key = max(at) if late else None
        made[key] = made.get(key, 0.0) + nbytes
        if (vid, spec) not in held:
            freed[min(at)] = freed.get(min(at), 0.0) + nbytes
