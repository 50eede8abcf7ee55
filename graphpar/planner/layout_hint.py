"""A ``shard()`` hint written with :class:`~graphpar.planner.layout.Layout` objects: checked, then placed on the mesh.

A strategy tuple gives each dimension a number of pieces; the planner puts the op's labels on consecutive mesh axes
in the op's device-matrix order (``strategy.place_hint``). A layout hint gives both the device matrix and, per
dimension, the device-matrix axes that split it, in any order and any combination (``layout("mp", ("dp", "sp"))``).
So:

* :func:`check_layout_hint` (pass ``read_hints``, no mesh yet) checks what MindSpore checks of a layout strategy:
  one layout per tensor input, all on one device matrix whose devices are the job's, each as long as its input's
  rank, dimensions the op shares (an einsum label of ``planner.dims``) split by the same aliases, no alias on a
  dimension the op cannot split, no alias for two different labels, splits that divide their dimension; and the
  ``out_strategy`` layouts: each output dimension keeps its label's aliases and may add only aliases of contracted
  labels (a reduce-scatter) or of unused axes. It returns a :class:`LayoutHint`, or raises a ``StrategyError``.
* ``choose_mesh`` refines the layout's device matrix like any other (each alias becomes a run of consecutive mesh
  axes: ranks fill both row-major).
* :func:`place_layout_hint` (pass ``apply_hints``) turns aliases into mesh axes: a label split by ``("dp", "sp")``
  takes dp's mesh axes then sp's, which ``to_partition_spec`` writes as a tuple of mesh axes in one
  ``PartitionSpec`` entry; the axes no label uses repeat the op (wherever they sit in the matrix).

``interleaved_parallel``: MindSpore computes the op in that many pieces on each device, one after another, to
overlap communication with computation; the data each device holds is the layout without it when it is the last
(minor) alias of its dimension. graphpar builds exactly that: the layout without the virtual split, with a one-time
notice that XLA schedules the op as one piece per device (its own scheduler overlaps collectives). Before another
alias of its entry (``("dp", "interleaved_parallel", "mp")``) MindSpore gives each device a strided block (the
pieces ``(d, 0, m)`` and ``(d, 1, m)``), which no ``PartitionSpec`` expresses: for a computed value graphpar takes
the layout without the virtual split there too (the same values; each device computes the contiguous block
``(d, m)`` instead, said once), for a Parameter, whose slices a checkpoint stores, it is refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from graphpar._logging import notice_once
from graphpar.errors import StrategyError
from graphpar.planner.dims import DimSpec
from graphpar.planner.layout import INTERLEAVED, Layout
from graphpar.planner.nd_tp import is_nd_tp, nd_tp_layout
from graphpar.planner.strategy import MeshInfo, NodeStrategy, Spec, _divides


@dataclass(frozen=True)
class LayoutHint:
    """A layout hint that passed its checks, independent of the mesh. ``device_matrix``/``aliases``: the device
    axes (``interleaved_parallel`` left out), what the mesh must refine; ``label_aliases``: the aliases splitting
    each labelled dimension; ``out_entries``: per output, per dimension, its aliases (None: no out layout);
    ``interleaved``: the virtual split (1 when none); ``in_entries``: per input, per dimension, its aliases where
    the inputs keep layouts of their own (an ND-TP MatMul, ``planner.nd_tp``), else None."""

    device_matrix: tuple[int, ...]
    aliases: tuple[str, ...]
    label_aliases: tuple[tuple[str, tuple[str, ...]], ...]
    out_entries: tuple[tuple[tuple[str, ...], ...], ...] | None
    interleaved: int
    in_entries: tuple[tuple[tuple[str, ...], ...], ...] | None = None  # an ND-TP MatMul's inputs, pinned as given


def _error(node, hint, reason: str, fix: str) -> StrategyError:
    return StrategyError(node.instance_name, hint, reason, node.scope, fix)


def _last(entry: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(a for a in entry if a != INTERLEAVED) + (INTERLEAVED,)


def _real(node, hint, layout: Layout, entry: tuple[str, ...], where: str, stored: bool = False) -> tuple[str, ...]:
    """An entry's device aliases: ``interleaved_parallel`` dropped. Before another alias it would give each device a
    strided block of the dimension: for a computed value the contiguous block of the layout without it holds the
    same values (said once); for a Parameter (``stored``), whose slices checkpoints keep, it is refused."""
    if INTERLEAVED not in entry:
        return entry
    if entry[-1] != INTERLEAVED:
        if stored:
            raise _error(node, hint, f"{where} puts '{INTERLEAVED}' before {entry[entry.index(INTERLEAVED) + 1:]}: "
                         "each device would store a strided, non-contiguous block of the Parameter, which graphpar's "
                         "device mesh cannot express", f"Put '{INTERLEAVED}' last in the entry, e.g. {_last(entry)}")
        notice_once(f"interleaved-strided:{node.instance_name}:{node.scope}",
                    f"op '{node.instance_name}' (scope {node.scope}): {where} puts '{INTERLEAVED}' before "
                    f"{entry[entry.index(INTERLEAVED) + 1:]}; MindSpore gives each device a strided block of it, "
                    f"graphpar the contiguous block of {tuple(a for a in entry if a != INTERLEAVED)} (the same "
                    "values; only which rows each device computes differs)")
    return tuple(a for a in entry if a != INTERLEAVED)


def check_layout_hint(node, dims: DimSpec, hint: tuple, out_hint: tuple | None, in_shapes: Sequence[tuple],
                      out_shapes: Sequence[tuple], n_devices: int, stored: frozenset[int] = frozenset()) -> LayoutHint:
    """``hint`` (one :class:`Layout` per tensor input) checked on ``n_devices`` devices (see the module docstring);
    ``stored``: the indices of the inputs that are Parameters."""
    first = hint[0]
    names = node.input_names or tuple(f"input {i}" for i in range(len(hint)))
    for layout in hint + tuple(out_hint or ()):
        if not isinstance(layout, Layout):
            raise _error(node, hint, f"out_strategy holds {layout!r} but in_strategy is written with layouts",
                         "Write both with layouts, or both with tuples of ints")
        if not layout.same_matrix(first):
            raise _error(node, hint, f"its layouts use different device matrices ({first.device_matrix} "
                         f"{first.alias_name} and {layout.device_matrix} {layout.alias_name})",
                         "Call one Layout object for every input and output of the op")
        if layout.entries is None:
            raise _error(node, hint, "a layout was given without its tensor map",
                         "Call the layout with one alias per dimension, e.g. layout('dp', 'None')")
    real = first.real_axes()
    devices = math.prod(d for _, d in real)
    if devices != n_devices:
        raise _error(node, hint, f"the layout's device matrix {first.device_matrix} with aliases {first.alias_name} holds "
                     f"{devices} devices but the job has {n_devices}",
                     f"Give the Layout a device matrix whose product is {n_devices}")
    if len(hint) != len(dims.inputs):
        raise _error(node, hint, f"{node.kind} has {len(dims.inputs)} tensor input(s) here but the strategy has "
                     f"{len(hint)} layouts", "Give one layout per tensor input")
    interleaved = first.size(INTERLEAVED) if first.interleaved else 1
    label_aliases: dict[str, tuple[tuple[str, ...], str]] = {}
    owner: dict[str, str] = {}
    nd = is_nd_tp(node.kind, node.attrs)
    in_entries: list[list[tuple[str, ...]]] = [[] for _ in hint]
    for i, (row, layout, shape) in enumerate(zip(dims.inputs, hint, in_shapes)):
        name = names[i] if i < len(names) else f"input {i}"
        if len(layout.entries) != len(shape):
            raise _error(node, hint, f"layout {i} has {len(layout.entries)} entries but {name} has shape "
                         f"{tuple(shape)}", f"Give {len(shape)} entries for {name}")
        for d, (label, entry, size) in enumerate(zip(row, layout.entries, shape)):
            where = f"{name} dim {d}"
            split = math.prod(layout.size(a) for a in entry)
            if size % split:
                raise _error(node, hint, f"{where} has size {size}, which {entry} (split {split}) does not divide",
                             f"Split {where} by a divisor of {size}")
            aliases = _real(node, hint, layout, entry, where, i in stored)
            if aliases and (label is None or label in dims.fixed):
                raise _error(node, hint, f"{node.kind} cannot split {where} (shapes {list(in_shapes)})",
                             f"Write 'None' for {where}")
            in_entries[i].append(aliases)
            if label is None or nd:
                continue
            if label in label_aliases and label_aliases[label][0] != aliases:
                prev, prev_where = label_aliases[label]
                raise _error(node, hint, f"{where} is split by {aliases or 'None'} but {prev_where} by "
                             f"{prev or 'None'}; {node.kind} needs these dimensions split alike",
                             "Split both by the same aliases")
            label_aliases.setdefault(label, (aliases, where))
            for a in aliases:
                if owner.setdefault(a, label) != label:
                    raise _error(node, hint, f"the alias '{a}' splits two different dimensions of {node.kind} "
                                 f"({where} and another)", "Give each device-matrix axis to one dimension")
    if nd:
        return _check_nd_tp(node, dims, hint, out_hint, out_shapes, first, tuple(map(tuple, in_entries)))
    labels = tuple((l, label_aliases[l][0]) for l in dims.order if label_aliases.get(l, ((),))[0])
    problem = dims.check({l: math.prod(first.size(a) for a in al) for l, al in labels}) \
        if dims.check is not None else None
    if problem is not None:
        raise _error(node, hint, f"{problem[0]} (shapes {list(in_shapes)})", problem[1])
    out_entries = None
    if out_hint is not None:
        out_entries = _check_out(node, dims, hint, out_hint, out_shapes, dict(labels), {a for _, al in labels
                                                                                      for a in al})
    if interleaved > 1:
        notice_once(f"interleaved:{node.instance_name}:{node.scope}",
                    f"op '{node.instance_name}' (scope {node.scope}): '{INTERLEAVED}' ({interleaved} pieces) is "
                    "MindSpore's split of the op inside each device; XLA runs it as one piece per device and "
                    "overlaps its collectives itself, with the same per-device data")
    return LayoutHint(tuple(d for _, d in real), tuple(a for a, _ in real), labels, out_entries, interleaved)


def _check_nd_tp(node, dims: DimSpec, hint, out_hint, out_shapes, first: Layout, entries: tuple) -> LayoutHint:
    """An ND-TP MatMul's layouts (``planner.nd_tp``): MindSpore keeps micro-interleaving to x's non-contracted
    dimensions; the output's layout is inferred, and a user's out layout must equal it."""
    a_row, w_row = dims.inputs
    raw_a, raw_w = hint[0].entries, hint[1].entries
    if INTERLEAVED in raw_a[a_row.index("k")] or any(INTERLEAVED in e for e in raw_w):
        raise _error(node, hint, f"'{INTERLEAVED}' splits the contracted dimension of x or a dimension of w",
                     f"Put '{INTERLEAVED}' on a batch or m dimension of x only")
    rs_axis = node.attrs.get("ndtp_reduce_scatter_axis")
    read = nd_tp_layout((a_row, w_row), dims.outputs[0], entries, rs_axis)
    if isinstance(read, tuple):
        raise _error(node, hint, read[0], read[1])
    out = read.out_entries
    for d, (entry, size) in enumerate(zip(out, out_shapes[0])):
        if size % math.prod(first.size(a) for a in entry):
            raise _error(node, hint, f"the inferred output layout splits output dim {d} (size {size}) by {entry}, "
                         "which does not divide it", f"Split the inputs so that {entry} divides {size}")
    if out_hint is not None and tuple(tuple(_real(node, out_hint, l, e, "out")) for l in out_hint
                                      for e in l.entries) != out:
        raise _error(node, out_hint, f"the 2D/3D MatMul's output layout is {out}, inferred from its inputs",
                     "Drop the out_strategy, or give exactly the inferred layout")
    labels = dict(read.label_aliases)
    real = first.real_axes()
    return LayoutHint(tuple(d for _, d in real), tuple(a for a, _ in real),
                      tuple((l, labels[l]) for l in dims.order if l in labels), (out,),
                      first.size(INTERLEAVED) if first.interleaved else 1, entries)


def _check_out(node, dims: DimSpec, hint, out_hint: tuple, out_shapes, labels: dict, used: set) -> tuple:
    if not dims.takes_out_strategy:
        raise _error(node, out_hint, f"{node.kind} takes no output layout: MindSpore infers its outputs' layouts "
                     "from the inputs'", "Drop the out_strategy; shard() the inputs only")
    if len(out_hint) != len(dims.outputs):
        raise _error(node, out_hint, f"out_strategy has {len(out_hint)} layouts for {len(dims.outputs)} output(s)",
                     "Give one layout per output")
    contracted = {a for l in dims.contracted for a in labels.get(l, ())}
    out = []
    for j, (row, layout, shape) in enumerate(zip(dims.outputs, out_hint, out_shapes)):
        if len(layout.entries) != len(shape):
            raise _error(node, out_hint, f"out layout {j} has {len(layout.entries)} entries for an output of shape "
                         f"{tuple(shape)}", "Give one entry per output dimension")
        entries = []
        for d, (label, entry, size) in enumerate(zip(row, layout.entries, shape)):
            where = f"output {j} dim {d}"
            aliases = _real(node, out_hint, layout, entry, where)
            base = labels.get(label, ()) if label is not None else ()
            extra = aliases[len(base):]
            if aliases[:len(base)] != base or any(a in used and a not in contracted for a in extra):
                raise _error(node, out_hint, f"{where} is split by {aliases or 'None'} but the inputs split it by "
                             f"{base or 'None'}", f"Keep {base or 'None'} first; further aliases may only be "
                             "those of contracted dimensions or unused axes (a reduce-scatter)")
            if size % math.prod(layout.size(a) for a in entry):
                raise _error(node, out_hint, f"{where} has size {size}, which {entry} does not divide",
                             f"Split {where} by a divisor of {size}")
            entries.append(aliases)
        out.append(tuple(entries))
    split_of = {label: math.prod(out_hint[0].size(a) for a in aliases) for row, entries in zip(dims.outputs, out)
                for label, aliases in zip(row, entries) if label is not None and aliases}
    problem = dims.check(split_of) if dims.check is not None else None  # the op's own conditions (Tile's multiples)
    if problem is not None:
        raise _error(node, out_hint, f"{problem[0]} (output shapes {list(out_shapes)})", problem[1])
    return tuple(out)


def alias_axes(device_matrix: Sequence[int], aliases: Sequence[str], mesh: MeshInfo) -> dict[str, tuple[str, ...]]:
    """Each device-matrix axis as the run of consecutive mesh axes it is (the mesh refines the matrix)."""
    out, names = {}, list(zip(mesh.names, mesh.sizes))
    for alias, size in zip(aliases, device_matrix):
        taken, acc = [], 1
        while acc < size and names:
            taken.append(names[0][0])
            acc *= names.pop(0)[1]
        if acc != size:
            raise ValueError(f"mesh {mesh.names} {mesh.sizes} does not refine the device matrix {tuple(device_matrix)}")
        out[alias] = tuple(taken)
    return out


def place_layout_hint(dims: DimSpec, checked: LayoutHint, mesh: MeshInfo) -> NodeStrategy:
    """The node's strategy on ``mesh``: every label on its aliases' mesh axes, the rest repeating."""
    axes = alias_axes(checked.device_matrix, checked.aliases, mesh)
    label_axes = tuple((l, tuple(m for a in al for m in axes[a])) for l, al in checked.label_aliases)
    used = {m for _, ms in label_axes for m in ms}
    repeat = tuple(m for m in mesh.names if m not in used)
    in_specs = None if checked.in_entries is None else tuple(
        tuple(tuple(m for a in entry for m in axes[a]) for entry in row) for row in checked.in_entries)
    strategy = NodeStrategy(dims, label_axes, repeat, mesh, None, in_specs)
    if checked.out_entries is None:
        return strategy
    out: list[tuple] = []
    for row in checked.out_entries:
        spec: Spec = tuple(tuple(m for a in entry for m in axes[a]) for entry in row)
        out.append(spec)
    return NodeStrategy(dims, label_axes, repeat, mesh, tuple(out), in_specs)


def aligned_strategies(dims: DimSpec, rows_specs: Sequence[tuple[tuple, Spec]], in_shapes, out_shapes,
                       mesh: MeshInfo) -> list[NodeStrategy]:
    """Strategies that take a neighbour's layout as it is: for each (labelled row, layout) pair, every label on the
    mesh axes the layout gives its dimension. Propagation offers them beside the enumerated candidates (consecutive
    runs of mesh axes in the op's order), which cannot express a layout a ``Layout`` placed on other axes
    (``("dp", "mp")`` with ``sp`` between them), so an op next to one can keep it instead of paying a
    redistribution. Rows that would split an unsplittable dimension, give one label two layouts, use a mesh axis
    twice, or fail the op's own conditions give none. A hint-only label (Conv2D's H and W) is taken this way, as
    MindSpore's propagation carries a neighbour's H/W split into a convolution, though never enumerated."""
    out = []
    for row, spec in rows_specs:
        axes: dict[str, tuple[str, ...]] = {}
        ok = True
        for label, split in zip(row, spec):
            if not split:
                continue
            if label is None or label in dims.fixed or axes.setdefault(label, tuple(split)) != tuple(split):
                ok = False
                break
        used = [m for group in axes.values() for m in group]
        if not ok or not axes or len(used) != len(set(used)) or not _divides(dims, in_shapes, out_shapes, axes, mesh):
            continue
        if dims.check is not None and dims.check({l: mesh.size(a) for l, a in axes.items()}) is not None:
            continue
        repeat = tuple(m for m in mesh.names if m not in used)
        out.append(NodeStrategy(dims, tuple((l, axes[l]) for l in dims.order if l in axes), repeat, mesh))
    return out
