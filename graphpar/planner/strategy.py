"""A node's strategy: labelled splits placed on the mesh, and the layouts they imply.

A :class:`NodeStrategy` assigns each label of a node's :class:`~graphpar.planner.dims.DimSpec` a run of
consecutive mesh axes (row-major, left to right: MindSpore's rank order), and the remaining axes to the repeat
dimension (on the right, or the left for OneHot-like ops). Everything else is derived: the MindSpore
``in_strategy`` tuples, the device matrix, and each tensor's layout as a *canonical spec*: per tensor dimension, the
tuple of mesh axes that split it (``()`` = not split). Two layouts are equal exactly when their canonical specs
are.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from jax.sharding import PartitionSpec

from graphpar.errors import StrategyError
from graphpar.ir.graph import MeshInfo as MeshInfo  # re-exported: the planner's name for the mesh
from graphpar.ir.graph import Spec as Spec
from graphpar.planner.dims import DimSpec, with_repeat
from graphpar.planner.layout import is_layout_strategy


def hint_device_matrix(dims: DimSpec, hint: Sequence[Sequence[int]], n_devices: int) -> tuple[int, ...] | None:
    """The device matrix (with its repeat dimension) a user's hint asks for on ``n_devices`` devices, before any
    check: what the mesh is chosen to express (``planner.passes.mesh_choice``). None when the hint does not fit
    the op's rule or the device count (``apply_hints`` then says why)."""
    if len(hint) != len(dims.inputs):
        return None
    splits: dict[str, int] = {}
    for row, entry in zip(dims.strategy_labels, hint):
        for label, s in zip(row, entry):
            if label is not None and s > 1:
                splits[label] = s
    core = tuple(splits.get(l, 1) for l in dims.order)
    total = math.prod(core)
    if not total or n_devices % total:
        return None
    return with_repeat(core, n_devices // total, dims.repeat_first)


def strategy_text(strategy: Sequence[Sequence[int]]) -> str:
    """MindSpore's printing: ``((2, 4), (4))`` (no trailing comma for one-element tuples); a strategy written with
    layouts prints each as MindSpore's dictionary."""
    if is_layout_strategy(strategy):
        return "(" + ", ".join(repr(layout) for layout in strategy) + ")"
    return "(" + ", ".join("(" + ", ".join(str(d) for d in row) + ")" for row in strategy) + ")"


def spec_text(spec: Spec) -> str:
    """A canonical layout as ``(m0, m1.m2)`` (``-`` for an unsplit dimension): how dumps and logs print it."""
    return "(" + ", ".join(".".join(axes) if axes else "-" for axes in spec) + ("," if len(spec) == 1 else "") + ")"


def to_partition_spec(spec: Spec) -> PartitionSpec:
    return PartitionSpec(*[(None if not axes else axes[0] if len(axes) == 1 else tuple(axes)) for axes in spec])


@dataclass(frozen=True)
class NodeStrategy:
    dims: DimSpec
    label_axes: tuple[tuple[str, tuple[str, ...]], ...]
    repeat_axes: tuple[str, ...]
    mesh: MeshInfo
    out_override: tuple[Spec, ...] | None = None
    # input layouts given directly: layout-following ops (Reshape), an ND-TP MatMul's inputs (planner.nd_tp)
    in_override: tuple[Spec, ...] | None = None

    @cached_property
    def axes(self) -> dict[str, tuple[str, ...]]:
        return dict(self.label_axes)

    def split(self, label: str | None) -> int:
        if label is None:
            return 1
        return self.mesh.size(self.axes.get(label, ()))

    def in_strategy(self) -> tuple[tuple[int, ...], ...]:
        if self.dims.hint_rows is not None:  # MindSpore's form of the strategy (Tile: one split per multiple)
            return tuple(tuple(self.split(l) if l is not None else 1 for l in row) for row in self.dims.hint_rows)
        return tuple(tuple(self.mesh.size(axes) for axes in self.input_spec(i)) for i in range(len(self.dims.inputs)))

    def in_strategy_text(self) -> str:
        return strategy_text(self.in_strategy())

    def device_matrix(self) -> tuple[int, ...]:
        if self.in_override is not None and not self.label_axes:
            # MindSpore's ReshapeInfo (a layout-following op has no labels): the device matrix is the input strategy
            core = self.in_strategy()[0] if self.in_override else ()
            return with_repeat(core, self.mesh.n_devices // max(math.prod(core), 1), False)
        core = tuple(self.split(l) for l in self.dims.order)
        return with_repeat(core, self.mesh.size(self.repeat_axes), self.dims.repeat_first)

    @property
    def devices_used(self) -> int:
        return math.prod(self.split(l) for l in self.dims.order)

    def _spec(self, row: Sequence[str | None]) -> Spec:
        axes = self.axes
        return tuple(axes.get(l, ()) if l is not None else () for l in row)

    @cached_property
    def input_specs(self) -> tuple[Spec, ...]:
        """Every input's layout, derived once: the planner asks for them per candidate and per edge."""
        if self.in_override is not None:
            return self.in_override
        return tuple(self._spec(row) for row in self.dims.inputs)

    @cached_property
    def output_specs(self) -> tuple[Spec, ...]:
        if self.out_override is not None:
            return self.out_override
        return tuple(self._spec(row) for row in self.dims.outputs)

    def input_spec(self, i: int) -> Spec:
        return self.input_specs[i]

    def output_spec(self, j: int) -> Spec:
        return self.output_specs[j]

    @cached_property
    def partial_axes(self) -> tuple[str, ...]:
        """Mesh axes over which outputs are partial sums before the op's reduction (contracted labels)."""
        axes = self.axes
        return tuple(a for l in self.dims.order if l in self.dims.contracted for a in axes.get(l, ()))


def _compositions(names: Sequence[str], n_groups: int) -> Iterator[list[tuple[str, ...]]]:
    """Every way to cut ``names`` into ``n_groups`` consecutive (possibly empty) runs."""
    if n_groups == 1:
        yield [tuple(names)]
        return
    for k in range(len(names) + 1):
        for rest in _compositions(names[k:], n_groups - 1):
            yield [tuple(names[:k])] + rest


def _divides(dims: DimSpec, in_shapes, out_shapes, axes: dict[str, tuple[str, ...]], mesh: MeshInfo) -> bool:
    for rows, shapes in ((dims.inputs, in_shapes), (dims.outputs, out_shapes)):
        for row, shape in zip(rows, shapes):
            for label, size in zip(row, shape):
                if label is not None and label in axes and size % mesh.size(axes[label]):
                    return False
    return True


def enumerate_strategies(dims: DimSpec, in_shapes, out_shapes, mesh: MeshInfo) -> list[NodeStrategy]:
    """Every strategy of ``dims`` on ``mesh`` whose splits divide the dimensions they split."""
    labels = [l for l in dims.order if l not in dims.hint_only]
    out = []
    for groups in _compositions(list(mesh.names), len(labels) + 1):
        if dims.repeat_first:
            repeat, label_groups = groups[0], groups[1:]
        else:
            repeat, label_groups = groups[-1], groups[:-1]
        axes = {l: g for l, g in zip(labels, label_groups) if g}
        if any(l in dims.fixed for l in axes):
            continue
        if not _divides(dims, in_shapes, out_shapes, axes, mesh):
            continue
        out.append(NodeStrategy(dims, tuple(axes.items()), tuple(repeat), mesh))
    return out


def replicated_strategy(dims: DimSpec, mesh: MeshInfo) -> NodeStrategy:
    return NodeStrategy(dims, (), tuple(mesh.names), mesh)


def _suggest(size: int, split: int, n_devices: int) -> int:
    ok = [d for d in range(1, n_devices + 1) if size % d == 0 and n_devices % d == 0]
    return min(ok, key=lambda d: (abs(d - split), -d))


def _scalar_operands(node, hint: tuple, n_inputs: int) -> tuple:
    """The hint's entries for the node's tensor inputs. MindSpore writes ``()`` for a Python-scalar operand
    (``Mul().shard(((dp, mp, 1, 1), ()))`` for ``mul(x, 0.125)``); those entries are dropped here."""
    if len(hint) <= n_inputs:
        return hint
    scalars = sorted(i for i, a in node.static_args.items()
                     if i < len(hint) and isinstance(a, (bool, int, float, complex, np.number)))
    if len(hint) - len(scalars) != n_inputs:
        return hint
    for i in scalars:
        if tuple(hint[i]) != ():
            raise StrategyError(node.instance_name, hint, f"entry {i} {tuple(hint[i])} is for the Python scalar "
                                f"operand {node.static_args[i]!r}, which has no dimensions to split", node.scope,
                                f"Write () for a scalar operand, e.g. {_with_entry(hint, i, ())!r}")
    return tuple(e for i, e in enumerate(hint) if i not in scalars)


def _with_entry(hint: tuple, i: int, entry: tuple) -> tuple:
    rows = [tuple(r) for r in hint]
    rows[i] = tuple(entry)
    return tuple(rows)


def from_hint(node, dims: DimSpec, hint: tuple, in_shapes, out_shapes, mesh: MeshInfo) -> NodeStrategy:
    """The strategy a user's ``shard()`` hint asks for, or a :class:`StrategyError` naming what is wrong: the hint
    checked (:func:`check_hint`) and placed on ``mesh`` (:func:`place_hint`)."""
    in_strategy, splits = check_hint(node, dims, hint, in_shapes, mesh.n_devices)
    return place_hint(node, dims, in_strategy, splits, mesh, node.out_hint, out_shapes)


def check_hint(node, dims: DimSpec, hint: tuple, in_shapes,
               n_devices: int) -> tuple[tuple[tuple[int, ...], ...], dict[str, int]]:
    """A user's ``shard()`` hint checked on ``n_devices`` devices, whatever the mesh's axes: its entries for the
    tensor inputs and the split of each label split more than once, or a :class:`StrategyError`.

    Checks as MindSpore's ``CheckStrategy``: one entry per tensor input (``()`` for a scalar operand), one split
    per dimension, splits that divide their dimension, dimensions the op shares split alike (a 1 is a split too:
    ``MatMul ((2, 1), (4, 1))`` is refused, never rewritten), and a product that divides the device count.
    """
    op, scope = node.instance_name, node.scope
    full = hint
    hint = _scalar_operands(node, hint, len(dims.inputs))
    if len(hint) != len(dims.inputs):
        raise StrategyError(op, full, f"{node.kind} has {len(dims.inputs)} tensor input(s) here but the strategy has "
                            f"{len(full)} entries", scope, "Give one tuple per tensor input")
    splits: dict[str, tuple[int, int, int]] = {}  # label -> (split, input, dimension) where first met
    names = node.input_names or tuple(f"input {i}" for i in range(len(hint)))

    def where_of(i: int, d: int) -> str:  # formatted for an error only: a hint is checked per op call
        return f"{names[i] if i < len(names) else f'input {i}'} dim {d}"

    shapes = dims.strategy_shapes(in_shapes)
    for i, (row, entry, shape) in enumerate(zip(dims.strategy_labels, hint, shapes)):
        if len(entry) != len(shape):
            raise StrategyError(op, full, f"entry {i} {entry} has {len(entry)} splits but {names[i]} has shape "
                                f"{tuple(shape)}", scope, f"Give {len(shape)} splits for {names[i]}")
        for d, (label, split, size) in enumerate(zip(row, entry, shape)):
            if size % split:
                where = where_of(i, d)
                prefer = {} if label is None else {label: _suggest(size, split, n_devices)}
                raise StrategyError(op, full, f"{where} has size {size}, which the split {split} does not divide "
                                    f"(shapes {shapes})", scope, f"Use a divisor of {size}, e.g. "
                                    f"{_repaired(dims, hint, shapes, n_devices, prefer)}")
            if split != 1 and (label is None or label in dims.fixed):
                where = where_of(i, d)
                raise StrategyError(op, full, f"{node.kind} cannot split {where} (shapes {shapes})", scope,
                                    f"Use 1 for {where}, e.g. {_repaired(dims, hint, shapes, n_devices)}")
            if label is None:
                continue
            if label in splits and splits[label][0] != split:
                prev, prev_where, where = splits[label][0], where_of(*splits[label][1:]), where_of(i, d)
                raise StrategyError(op, full, f"{where} is split {split} but {prev_where} is split {prev}; "
                                    f"{node.kind} needs these dimensions split alike, a 1 included (shapes "
                                    f"{shapes})", scope, f"Split both by the same factor, e.g. "
                                    f"{_repaired(dims, hint, shapes, n_devices, {label: prev})}")
            splits.setdefault(label, (split, i, d))
    split_of = {l: v[0] for l, v in splits.items() if v[0] != 1}
    problem = dims.check(split_of) if dims.check is not None else None
    if problem is not None:
        fix = _repair_splits(dims, hint, shapes, n_devices)  # an example only where one passes the op's check
        example = "" if dims.check({l: v for l, v in fix.items() if v != 1}) else f", e.g. {_spelled(dims, fix)}"
        raise StrategyError(op, full, f"{problem[0]} (shapes {shapes})", scope, f"{problem[1]}{example}")
    total = math.prod(split_of.values())
    if total > n_devices or n_devices % total:
        raise StrategyError(op, hint, f"the splits multiply to {total} devices but the job has {n_devices} "
                            f"(shapes {shapes})", scope,
                            f"Use splits whose product divides {n_devices}, e.g. "
                            f"{_repaired(dims, hint, shapes, n_devices)}")
    return hint, split_of


def place_hint(node, dims: DimSpec, in_strategy: tuple, splits: dict[str, int], mesh: MeshInfo,
               out_hint: tuple | None, out_shapes) -> NodeStrategy:
    """A checked hint (:func:`check_hint`: its tensor inputs' entries and per-label splits) placed on ``mesh``:
    each label on consecutive mesh axes in device-matrix order, then ``out_hint`` (MindSpore's ``out_strategy``).
    A :class:`StrategyError` when a split does not fit the mesh's axes or ``out_hint`` cannot hold."""
    op, scope, hint = node.instance_name, node.scope, in_strategy
    total = math.prod(splits.values())
    remaining = list(zip(mesh.names, mesh.sizes))
    repeat = mesh.n_devices // total
    if dims.repeat_first:
        remaining = _take(remaining, repeat, op, hint, scope)[1]
    axes: dict[str, tuple[str, ...]] = {}
    for label in dims.order:
        want = splits.get(label, 1)
        taken, remaining = _take(remaining, want, op, hint, scope)
        if taken:
            axes[label] = taken
    repeat_axes = tuple(n for n, _ in remaining) if not dims.repeat_first else tuple(
        n for n in mesh.names if n not in {a for g in axes.values() for a in g})
    strategy = NodeStrategy(dims, tuple(axes.items()), repeat_axes, mesh)
    if out_hint is not None:
        strategy = with_out_strategy(node, strategy, out_hint, out_shapes)
    return strategy


def _repaired(dims: DimSpec, hint: tuple, shapes: Sequence[tuple[int, ...]], n_devices: int,
              prefer: dict[str, int] | None = None) -> str:
    """A valid strategy close to ``hint``, for the "e.g." of an error: dimensions the op cannot split (or splits only
    under its own conditions, ``hint_only``) get 1, each label one split (``prefer``'s, else its first in the hint)
    reduced to a divisor of every dimension it labels, and the largest splits reduced until their product divides
    ``n_devices``. Repairing every problem at once, not the one reported, means following the suggestion never meets
    the next error."""
    return _spelled(dims, _repair_splits(dims, hint, shapes, n_devices, prefer))


def _spelled(dims: DimSpec, splits: dict[str, int]) -> str:
    # Python's spelling, not MindSpore's printing: the user pastes it into shard(), where (4) is not a tuple
    return repr(tuple(tuple(splits.get(l, 1) if l is not None else 1 for l in row) for row in dims.strategy_labels))


def _repair_splits(dims: DimSpec, hint: tuple, shapes: Sequence[tuple[int, ...]], n_devices: int,
                   prefer: dict[str, int] | None = None) -> dict[str, int]:
    """Each label's split in :func:`_repaired`'s suggestion."""
    want = dict(prefer or {})
    sizes: dict[str, list[int]] = {}
    for row, entry, shape in zip(dims.strategy_labels, hint, shapes):
        for label, split, size in zip(row, entry, shape):
            if label is not None and label not in dims.fixed and label not in dims.hint_only:
                want.setdefault(label, split)
                sizes.setdefault(label, []).append(size)
    splits = {label: math.gcd(want[label], *sizes[label]) for label in sizes}
    while int(np.prod(list(splits.values()) or [1])) > n_devices or n_devices % int(np.prod(list(splits.values())
                                                                                            or [1])):
        label = max(splits, key=lambda l: splits[l])
        value = splits[label]
        splits[label] = value // next(f for f in range(2, value + 1) if value % f == 0)
    return splits


def _take(remaining, want: int, op, hint, scope):
    taken, acc = [], 1
    while acc < want and remaining:
        name, size = remaining[0]
        acc *= size
        taken.append(name)
        remaining = remaining[1:]
    if acc != want:
        raise StrategyError(op, hint, f"a split of {want} does not fit the device mesh's axes", scope,
                            "Use splits made of the device count's factors in the mesh order")
    return tuple(taken), remaining


def with_out_strategy(node, strategy: NodeStrategy, out_hint: tuple, out_shapes) -> NodeStrategy:
    """Apply MindSpore's ``out_strategy``: an output dimension may take extra splits from the contracted or
    repeated devices (``MatMul`` ((2, 4), (4, 1)) with out_strategy ((8, 1),) is a reduce-scatter)."""
    op, scope, mesh = node.instance_name, node.scope, strategy.mesh
    if not strategy.dims.takes_out_strategy:
        raise StrategyError(op, out_hint, f"{node.kind} takes no out_strategy: MindSpore infers its outputs' layouts "
                            "from the inputs'", scope, "Drop the out_strategy; shard() the inputs only")
    own = strategy.dims.own_outputs
    if len(out_hint) != len(own):
        raise StrategyError(op, out_hint, f"out_strategy has {len(out_hint)} entries for {len(own)} "
                            "output(s)", scope, "Give one tuple per output")
    pool = list(strategy.partial_axes) + list(strategy.repeat_axes)
    specs = []
    for j, (row, entry, shape) in enumerate(zip(strategy.dims.outputs, out_hint, out_shapes)):
        if len(entry) != len(shape):
            raise StrategyError(op, out_hint, f"out_strategy entry {j} has {len(entry)} splits for an output of "
                                f"rank {len(shape)}", scope, "Give one split per output dimension")
        spec = []
        for d, (label, want) in enumerate(zip(row, entry)):
            base = strategy.axes.get(label, ()) if label else ()
            have = mesh.size(base)
            if want % have:
                raise StrategyError(op, out_hint, f"output dim {d} must be split by a multiple of {have}", scope,
                                    f"Use {have} or a multiple of it")
            extra, acc = [], 1
            while acc < want // have and pool:
                extra.append(pool.pop(0))
                acc *= mesh.size(extra[-1:])
            if acc != want // have or shape[d] % want:
                raise StrategyError(op, out_hint, f"output dim {d} cannot be split {want} from this in_strategy",
                                    scope, f"Splits beyond {have} must come from contracted or repeated devices")
            spec.append(tuple(base) + tuple(extra))
        specs.append(tuple(spec))
    # residuals a backward reads (an op differentiated inside construct) keep the in_strategy's layout
    residual_specs = strategy.output_specs[len(own):]
    return NodeStrategy(strategy.dims, strategy.label_axes, strategy.repeat_axes, mesh, tuple(specs) + residual_specs)
