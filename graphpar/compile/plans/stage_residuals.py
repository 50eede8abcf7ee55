"""What one repeated layer holds in a pipeline stage's programs, read from its planned trace (``stage_profile``'s
probe): the residuals a stage's forward keeps per micro-batch and the largest parameter block (its gradient is
made before it is added to the accumulator)."""

from __future__ import annotations

from typing import Any

from graphpar.ir.graph import Graph
from graphpar.planner.cost import block_bytes, grad_values, replicated_spec
from graphpar.planner.memory_model import checkpoint_keeps_input, keeps_output


def stage_residuals(planned: Graph, probe: str, fold: str) -> tuple[float, float, float]:
    """Per device, what a pipeline stage's forward keeps of one layer per micro-batch: the op outputs its backward
    reads (a stage saves op outputs only: ``memory_model.checkpoint_keeps_input``), each once per layout its
    readers read it in (a Softmax's output in its own), the layer's input (the output of the Add that reads the
    Parameter named ``probe``) among them, ops scoped ``fold`` left out; that input in its layout and the layer's
    state arrays (a causal mask held as a Tensor attribute) in theirs: what a recomputed layer keeps (its
    checkpoint's inputs, saved with each micro-batch's residuals; measured on a compiled MoE stage); and the part
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
            if v.producer is None and v.kind == "state" and v.is_array:
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
