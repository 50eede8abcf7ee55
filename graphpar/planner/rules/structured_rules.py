"""Sharding rules of raw jax primitives with structure: split, scatter, top_k, control flow, custom derivatives.

Without a rule, a primitive runs replicated and propagation stops at it (everything downstream falls back to the
default). These rules let layouts pass through:

* ``split``: every dimension but the split axis keeps its label on every piece.
* ``unstack`` (jax >= 0.12: ``lax.unstack``, and the keys of ``jax.random.split`` that a Dropout draws from): every
  dimension but the unstacked axis keeps its label on every result, which drops that axis.
* ``scatter`` / ``scatter-add`` / ...: the operand's window dimensions that the updates cover whole share labels
  with the updates' window dimensions and the result; scattered dimensions and the indices stay whole.
* ``top_k``: the leading dimensions keep their labels; the searched axis stays whole.
* ``scan`` / ``while`` / ``cond`` (opaque bodies): a carried value keeps its layout through the loop or branch
  (the final carry of ``scan``/``while`` has the initial carry's shape; a ``cond`` output takes the labels of the
  first operand of the same shape). Correctness never depends on it: XLA inserts whatever the body needs; the
  rule only avoids gathering a carried value at the loop boundary.
* ``custom_jvp_call`` / ``custom_vjp_call``: elementwise when its body is; else the rule of the body's only
  primitive kind when the body is one such equation on the same operands; else batch-parallel (dimension 0 shared
  by every input and output of equal leading size) when that is all the shapes allow; else no rule (replicated).
"""

from __future__ import annotations

from types import SimpleNamespace

from graphpar.planner.dims import DimSpec, elementwise, register, rule_for, shapes_of
from graphpar.planner.rules.lax_rules import ELEMENTWISE


def _labels(rank: int, prefix: str = "d") -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(rank))


def _input_without_axis(node, graph) -> tuple[tuple[str | None, ...], int]:
    """The input's labels with the eqn's ``axis`` left unlabelled (never split), and the number of outputs."""
    ins, outs = shapes_of(node, graph)
    labels = _labels(len(ins[0]))
    axis = node.eqn.params["axis"] % len(labels)
    return tuple(None if i == axis else l for i, l in enumerate(labels)), len(outs)


@register("split")
def _split(node, graph):
    row, n_out = _input_without_axis(node, graph)
    return DimSpec((row,), (row,) * n_out, tuple(l for l in row if l))


@register("unstack")
def _unstack(node, graph):
    row, n_out = _input_without_axis(node, graph)
    kept = tuple(l for l in row if l)
    return DimSpec((row,), (kept,) * n_out, kept)


@register("scatter", "scatter-add", "scatter_add", "scatter-mul", "scatter_mul", "scatter-min", "scatter_min",
          "scatter-max", "scatter_max")
def _scatter(node, graph):
    ins, outs = shapes_of(node, graph)
    operand, indices, updates = ins[0], ins[1], ins[2]
    dn = node.eqn.params["dimension_numbers"]
    if dn.operand_batching_dims:
        return None
    window_operand = [d for d in range(len(operand)) if d not in dn.inserted_window_dims]
    op_row: list = [None] * len(operand)
    upd_row: list = [None] * len(updates)
    for od, ud in zip(window_operand, dn.update_window_dims):
        if updates[ud] == operand[od] and od not in dn.scatter_dims_to_operand_dims:
            op_row[od] = upd_row[ud] = f"w{od}"
    labels = tuple(l for l in op_row if l)
    return DimSpec((tuple(op_row), tuple(None for _ in indices), tuple(upd_row)), (tuple(op_row),), labels)


@register("top_k")
def _top_k(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    axis = node.eqn.params.get("axis", rank - 1) % rank
    row = tuple(None if i == axis else f"d{i}" for i in range(rank))
    return DimSpec((row,), (row, row), tuple(l for l in row if l))


def _carry(ins, outs, pairs) -> DimSpec:
    """Labels shared by each (input index, output index) pair of equal shapes; everything else whole."""
    in_rows = [[None] * len(s) for s in ins]
    out_rows = [[None] * len(s) for s in outs]
    order = []
    for k, (i, j) in enumerate(pairs):
        if ins[i] != outs[j]:
            continue
        for d in range(len(ins[i])):
            label = f"c{k}_{d}"
            in_rows[i][d] = out_rows[j][d] = label
            order.append(label)
    return DimSpec(tuple(map(tuple, in_rows)), tuple(map(tuple, out_rows)), tuple(order))


def _scan_counts(params) -> tuple[int, int]:
    """(constants, carry) operand counts of a scan equation. jax < 0.12 gives them as ``num_consts`` and
    ``num_carry``; later jax packs the operands as one tree of (constants, carry, xs) in ``ft_in``."""
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(list(consts)), len(list(carry))


@register("scan")
def _scan(node, graph):
    ins, outs = shapes_of(node, graph)
    consts, carry = _scan_counts(node.eqn.params)
    return _carry(ins, outs, [(consts + j, j) for j in range(carry)])


@register("while")
def _while(node, graph):
    ins, outs = shapes_of(node, graph)
    skip = node.eqn.params["cond_nconsts"] + node.eqn.params["body_nconsts"]
    return _carry(ins, outs, [(skip + j, j) for j in range(len(outs))])


@register("cond")
def _cond(node, graph):
    ins, outs = shapes_of(node, graph)
    used: set[int] = set()
    pairs = []
    for j, shape in enumerate(outs):
        i = next((i for i in range(1, len(ins)) if i not in used and ins[i] == shape), None)
        if i is not None:
            used.add(i)
            pairs.append((i, j))
    return _carry(ins, outs, pairs)


_WRAPPERS = {"broadcast_in_dim", "jit", "pjit", "convert_element_type"}


def _inner_jaxpr(node):
    params = node.eqn.params
    inner = params.get("call_jaxpr", params.get("fun_jaxpr"))
    return getattr(inner, "jaxpr", inner)


@register("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr")
def _custom(node, graph):
    ins, outs = shapes_of(node, graph)
    jaxpr = _inner_jaxpr(node)
    eqns = list(getattr(jaxpr, "eqns", []))
    prims = {e.primitive.name for e in eqns}
    if prims <= ELEMENTWISE | _WRAPPERS and all(len(o) == len(outs[0]) for o in outs):
        return elementwise(ins, outs)
    core = [e for e in eqns if e.primitive.name not in _WRAPPERS]
    if len(core) == 1 and jaxpr is not None:
        spec = _one_equation(core[0], jaxpr, ins, outs)
        if spec is not None:
            return spec
    return _batch_parallel(ins, outs)


def _one_equation(eqn, jaxpr, ins, outs) -> DimSpec | None:
    """The rule of the body's single equation, when it reads the call's inputs and writes its outputs directly."""
    rule = rule_for(eqn.primitive.name)
    if rule is None or [v for v in eqn.invars] != list(jaxpr.invars) or list(eqn.outvars) != list(jaxpr.outvars):
        return None
    values = {i: SimpleNamespace(shape=tuple(s)) for i, s in enumerate(ins + outs)}
    probe = SimpleNamespace(eqn=eqn, inputs=list(range(len(ins))), outputs=list(range(len(ins), len(ins) + len(outs))),
                            static_args={}, attrs={}, kind=eqn.primitive.name)
    return rule(probe, SimpleNamespace(values=values))


def _batch_parallel(ins, outs) -> DimSpec | None:
    """Dimension 0 shared by every tensor when all have one leading size (a per-example function): safe to split
    the batch whatever the body does along the other dimensions."""
    shapes = [s for s in ins + outs]
    if not shapes or any(not s for s in shapes) or len({s[0] for s in shapes}) != 1:
        return None
    row = lambda s: ("b",) + (None,) * (len(s) - 1)  # noqa: E731
    return DimSpec(tuple(row(s) for s in ins), tuple(row(s) for s in outs), ("b",))
