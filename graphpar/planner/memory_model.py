"""What a training step keeps resident per device: the memory terms of the cost model, calibrated on XLA.

The compiled step's peak (``memory_analysis()``: arguments + outputs + temporaries - aliased outputs, the bytes the
executable needs at once) has three parts, and this module says which values fall in each:

* **persistent** — the step's arguments: each Parameter's block, its optimizer state (donated: the updated copies
  alias them) and the dataset batch. The optimizer's state per parameter is read from the optimizer the program
  runs (:func:`optimizer_slots`: its optax transformation's ``init`` evaluated abstractly), not assumed: Momentum
  keeps 1 copy, Adam 2, plain SGD 0.
* **activations kept for the backward pass** (*residuals*) — by op kind (:func:`keeps_input`,
  :func:`keeps_output`): a contraction keeps the operand the *other* operand's gradient needs (MatMul keeps ``x``
  for ``dW``), a nonlinearity its input (ReLU, GeLU, LayerNorm, Square) or its output (Softmax, Exp, Tanh), linear
  ops (Add, BiasAdd, Reshape, Transpose, a reduction, a Mul by a constant) nothing. A value is kept once, in its
  producer's layout, when any consumer or its producer keeps it; a consumer that reads it redistributed keeps its
  own copy too. Outputs nobody keeps are not counted (XLA fuses elementwise chains and frees what the backward does
  not read).
* **gradients** — a Parameter's gradient that a collective reduces (data parallel's AllReduce) is materialised
  whole, lives until the update, and the collective writes a second buffer: at the end of the backward pass the
  step holds persistent + 2 x those gradients, while during it the residuals + those gradients. A gradient no
  collective touches (a weight split over every device) is consumed by its update as soon as it is made.

So the peak is ``persistent + max(activations + gradients + transient, 2 x gradients)``: ``Cost.memory_bytes``
carries ``persistent + activations + gradients`` (additive over ops), ``Cost.activation_bytes`` and
``Cost.gradient_bytes`` its parts, ``Cost.transient_bytes`` the largest buffer the backward pass holds briefly (an
output's cotangent, combined by max), and :func:`peak_bytes` the maximum. Counting every residual and every reduced
gradient live at once is an upper bound of the backward pass (XLA frees residuals as gradients appear; how much
overlaps depends on its schedule): the prediction errs on the safe side. Measured ratios: docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from graphpar.planner.state_paths import parameter_of

__all__ = ["DEFAULT_OPTIMIZER_SLOTS", "checkpoint_keeps_input", "compiled_peak_bytes", "keeps_input", "keeps_output",
           "makes_weight_gradient",
           "optimizer_slots", "OptimizerSlots", "param_slots", "peak_bytes", "value_kept", "graph_optimizer_slots",
           "sole_keeper"]

# optimizer-state copies per parameter element assumed when the optimizer is unknown (a plan made from a loss
# network alone): Adam's two moments, the largest of the common optimizers, so the prediction errs on the safe side
DEFAULT_OPTIMIZER_SLOTS = 2.0

# ops whose backward reads none of their inputs or outputs (linear in every input, or shape-only)
_LINEAR = frozenset({
    "Add", "AddN", "Sub", "BiasAdd", "Neg", "Reshape", "Flatten", "ExpandDims", "Squeeze", "Transpose", "Concat",
    "Stack", "Split", "Slice", "StridedSlice", "Pad", "Tile", "ReduceSum", "ReduceMean", "Cast", "Identity",
    "OneHot", "Argmax", "Argmin", "ZerosLike", "OnesLike", "AdaptiveAvgPool2D", "AvgPool", "BroadcastTo",
    "Depend", "Gather", "SparseGatherV2", "GatherNd", "GatherD", "UnsortedSegmentSum", "CumSum", "Reshard",
    "add", "sub", "neg", "reshape", "squeeze", "expand_dims", "transpose", "broadcast_in_dim", "concatenate",
    "slice", "pad", "rev", "reduce_sum", "convert_element_type", "copy", "copy_p", "dynamic_slice",
    "dynamic_update_slice", "reduce_window_sum", "cumsum", "gather", "iota", "stop_gradient", "argmax", "argmin",
    "split", "add_any",
})
# comparisons: no gradient flows through them, so their backward reads nothing (an MoE router's NotEqual on its
# combine weights makes the dispatch mask; measured on a compiled MoE stage: its input is not kept for it)
_COMPARISONS = frozenset({"NotEqual", "Equal", "Less", "LessEqual", "Greater", "GreaterEqual", "IsNan", "IsInf",
                          "IsFinite", "ne", "eq", "lt", "le", "gt", "ge", "is_finite"})
# products: input i is kept when another input is differentiated (MatMul's x for dW, W for dx)
_PRODUCTS = frozenset({"MatMul", "BatchMatMul", "Conv2D", "Mul", "Einsum", "dot_general", "mul",
                       "conv_general_dilated"})
# ops whose backward reads their output (y' = f(y))
_OUTPUT = frozenset({"Softmax", "LogSoftmax", "Exp", "Tanh", "Sigmoid", "Sqrt", "Rsqrt", "exp", "tanh", "logistic",
                     "sqrt", "rsqrt"})


# composite ops whose backward reads intermediates of their own rather than their inputs: per op, how many buffers
# of its first input's size it keeps (the implementations in graphpar/ops/nn_ops.py): a normalisation keeps
# x - mean and the normalised x (the scale's gradient), GeLU (tanh form) its input's tanh term besides the input,
# a softmax cross-entropy the softmax of the logits
_INTERNAL = {"LayerNorm": 2.0, "BatchNorm": 2.0, "SyncBatchNorm": 2.0, "GeLU": 1.0, "FastGeLU": 1.0,
             "SoftmaxCrossEntropyWithLogits": 1.0, "SparseSoftmaxCrossEntropyWithLogits": 1.0}
_NOT_INPUTS = frozenset({"LayerNorm", "BatchNorm", "SyncBatchNorm"})


# the buffers of its largest float input's or output's size an op's backward holds briefly; 1 unless listed
# (measured on XLA:CPU: a convolution's backward holds the cotangent, a padded copy and the input gradient; a max
# pool's, lax.reduce_window's gradient, packs value and tangent pairs over the padded input window by window)
_TRANSIENT = {"Conv2D": 3.0, "conv_general_dilated": 3.0, "MaxPool": 6.0, "reduce_window_max": 6.0}


def transient_buffers(node: Any) -> float:
    """How many buffers of its largest input's or output's size ``node``'s backward holds at once."""
    return _TRANSIENT.get(node.kind, 1.0)


def internal_residuals(node: Any, grads: frozenset[int]) -> float:
    """Buffers of its first input's size that ``node``'s backward keeps besides its inputs and outputs."""
    if not any(v in grads for v in node.inputs):
        return 0.0
    return _INTERNAL.get(node.kind, 0.0)


def keeps_input(node: Any, k: int, graph: Any, grads: frozenset[int]) -> bool:
    """Whether ``node``'s backward reads its ``k``-th input (so the step keeps it from the forward pass).
    Nothing is kept by an op no gradient flows through; an op kind not listed keeps its differentiated inputs."""
    values = graph.values
    vid = node.inputs[k]
    value = values[vid]
    if not value.is_array or not value.shape or not any(v in grads for v in node.inputs):
        return False
    kind = node.kind
    if kind in _LINEAR or kind in _COMPARISONS or kind in _OUTPUT or kind in _NOT_INPUTS:
        return False
    if kind in _PRODUCTS:
        return any(j != k and v in grads for j, v in enumerate(node.inputs))
    producer = graph.nodes.get(value.producer) if value.producer is not None else None
    if producer is not None and producer.kind in _NOT_INPUTS and len(node.inputs) == 1:
        # a nonlinearity after a normalisation: XLA recomputes the normalised output in the backward fusion
        # from the x-hat the normalisation keeps (measured: conv -> BatchNorm -> ReLU keeps 3 buffers, not 4)
        return False
    if kind in ("SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits"):
        return k > 0  # the labels (the softmax of the logits is internal)
    return _is_float(value)


def keeps_output(node: Any, j: int, graph: Any, grads: frozenset[int]) -> bool:
    """Whether ``node``'s backward reads its ``j``-th output (Softmax, Exp, Tanh: ``dy -> dy * f'(y)``)."""
    return node.kind in _OUTPUT and any(v in grads for v in node.inputs)


def value_kept(graph: Any, vid: int, grads: frozenset[int]) -> bool:
    """Whether the op output ``vid`` is kept for the backward pass by its producer or any consumer."""
    value = graph.values[vid]
    if value.producer is None:
        return False
    producer = graph.nodes.get(value.producer)
    if producer is not None and keeps_output(producer, producer.outputs.index(vid), graph, grads):
        return True
    return _consumers_keep(graph, vid, grads)


def checkpoint_keeps_input(node: Any, k: int, graph: Any, grads: frozenset[int]) -> bool:
    """Whether ``node`` keeps its ``k``-th input for the backward pass in a program that saves op outputs only (a
    pipeline stage's forward: ``compile.lowering.recompute.activations_only``): as :func:`keeps_input`, except that
    what an op computes inside itself (a normalisation's x - mean, GeLU's tanh term, a cross-entropy's softmax) is
    recomputed from its input, so that input is kept instead, whatever op made it. The input is kept in the layout
    ``node`` reads it (measured: a redistributed input is kept as it was redistributed)."""
    value = graph.values[node.inputs[k]]
    if not value.is_array or not value.shape or not _is_float(value) or not any(v in grads for v in node.inputs):
        return False
    if node.kind in _LINEAR or node.kind in _COMPARISONS:
        return False
    if node.kind in _PRODUCTS:
        return any(j != k and v in grads for j, v in enumerate(node.inputs))
    return True  # a Softmax too: its rule reads an output of its own the policy cannot name (measured: x and y kept)


def _consumers_keep(graph: Any, vid: int, grads: frozenset[int]) -> bool:
    return any(keeps_input(node, k, graph, grads) for node, k in _consumers(graph, vid))


def _consumers(graph: Any, vid: int) -> list[tuple[Any, int]]:
    """The consumers of ``vid`` in this graph (a pipeline stage's graph: those of other stages are left out, they
    keep their own copy of what they receive)."""
    return [(graph.nodes[n], k) for n, k in graph.values[vid].consumers if n in graph.nodes]


def _is_float(value: Any) -> bool:
    try:
        return np.issubdtype(np.dtype(value.dtype), np.inexact)
    except TypeError:
        return False


def param_slots(graph: Any, value: Any) -> float | None:
    """Optimizer-state copies per element of the Parameter ``value`` (``graph.plan.optimizer_slots``, set from
    the program's optimizer), :data:`DEFAULT_OPTIMIZER_SLOTS` when the optimizer is unknown, None when the
    optimizer does not update it (its gradient is neither kept nor stored)."""
    slots = graph.plan.optimizer_slots
    if slots is None:
        return DEFAULT_OPTIMIZER_SLOTS
    return slots.get(value.name)


def optimizer_slots(optimizer: Any, params: Mapping[str, Any]) -> dict[str, float]:
    """Per parameter name, the optimizer state's elements per parameter element: the optimizer's optax
    transformation initialised abstractly (``jax.eval_shape``, nothing allocated) on ``params`` (name -> anything
    with ``shape`` and ``dtype``), and each state leaf under a parameter's name credited to it. Parameters the
    optimizer does not own are left out (not trained)."""
    return dict(OptimizerSlots(optimizer, params))


class OptimizerSlots(Mapping[str, float]):
    """:func:`optimizer_slots`, worked out on first read. The optimizer's transformation and the parameters' shapes
    are taken when it is made; only the abstract ``init`` waits. Why: the memory terms are its only readers (a
    search, a memory budget, a dry run's prediction), a plan whose every layout is given reads none of them, and
    the abstract ``init`` is a trace over every parameter (3 % of graphpar's share of the GPT bench model's first
    step, 12 ms)."""

    def __init__(self, optimizer: Any, params: Mapping[str, Any]):
        owned = set(optimizer.param_names)
        self._avals = {n: jax.ShapeDtypeStruct(tuple(p.shape), p.dtype) for n, p in params.items() if n in owned}
        self._init = optimizer.transformation().init if self._avals else None
        self._slots: dict[str, float] | None = None

    @property
    def avals(self) -> Mapping[str, Any]:
        """The owned parameters' shapes and dtypes: with the optimizer, all the slots are worked out from."""
        return self._avals

    def _worked_out(self) -> dict[str, float]:
        if self._slots is None:
            self._slots = _slots_of(self._init, self._avals) if self._avals else {}
        return self._slots

    def __getitem__(self, name: str) -> float:
        return self._worked_out()[name]

    def __iter__(self):
        return iter(self._worked_out())

    def __len__(self) -> int:
        return len(self._worked_out())

    def __repr__(self) -> str:
        return repr(self._worked_out())


def _slots_of(init: Any, avals: Mapping[str, Any]) -> dict[str, float]:
    """Each parameter's optimizer-state elements per element from the abstract state ``init(avals)``."""
    state = jax.eval_shape(init, avals)
    out = {n: 0.0 for n in avals}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        name = parameter_of(path, avals)
        if name is not None and tuple(leaf.shape) == tuple(avals[name].shape):
            size = float(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize
            out[name] += size / max(float(np.prod(avals[name].shape)) * np.dtype(avals[name].dtype).itemsize, 1.0)
    return out


def compiled_peak_bytes(analysis: Any) -> int:
    """What this model predicts, read from a compiled executable's ``memory_analysis()``: arguments + outputs +
    temporaries - aliased outputs (the donated state the updated copies reuse)."""
    return (analysis.argument_size_in_bytes + analysis.output_size_in_bytes + analysis.temp_size_in_bytes
            - analysis.alias_size_in_bytes)


def peak_bytes(total: Any, persistent: float = 0.0) -> float:
    """The step's predicted per-device peak from the summed :class:`~graphpar.planner.cost.Cost` of a plan and
    the bytes outside any op (the dataset batch): ``arguments + max(activations + gradients + transient,
    2 x gradients)``, the larger of the backward pass's and the update's."""
    arguments = persistent + total.memory_bytes - total.activation_bytes - total.gradient_bytes
    return arguments + max(total.activation_bytes + total.gradient_bytes + total.transient_bytes,
                           2.0 * total.gradient_bytes)


def graph_optimizer_slots(graph: Any, optimizer: Any) -> Mapping[str, float] | None:
    """:func:`optimizer_slots` of the Parameters of a traced ``graph``, worked out when first read
    (:class:`OptimizerSlots`); None without an optimizer."""
    if optimizer is None:
        return None
    params = {v.name: v for v in graph.values.values() if v.kind == "param" and v.producer is None}
    return OptimizerSlots(optimizer, params)


def sole_keeper(graph: Any, vid: int, grads: frozenset[int]) -> bool:
    """Whether exactly one consumer (and not the producer) keeps the op output ``vid`` for the backward pass."""
    producer = graph.nodes.get(graph.values[vid].producer)
    if producer is not None and keeps_output(producer, producer.outputs.index(vid), graph, grads):
        return False
    return sum(keeps_input(node, k, graph, grads) for node, k in _consumers(graph, vid)) == 1


def makes_weight_gradient(node: Any, graph: Any, grads: frozenset[int]) -> bool:
    """Whether ``node`` makes a Parameter's gradient from its output's cotangent (a product with a differentiated
    weight: MatMul's ``dW = x^T dy``). XLA schedules those products after the rest of a backward program (measured
    on compiled GPT and MoE pipeline stages: the weight gradients are made together before they are accumulated
    or reduced), so such an output's cotangent lives until the end of its layer's backward."""
    return node.kind in _PRODUCTS and any(graph.values[v].kind == "param" and v in grads for v in node.inputs)
