"""MindSpore 2.x's functional ``shard(fn, in_strategy, out_strategy=None, parameter_plan=None, device="Ascend",
level=0)`` and ``Cell.shard(...)``: the layouts of a function's or Cell's inputs, outputs and named Parameters,
with every op inside left to sharding propagation.

Each layout becomes a layout constraint in the graph IR (``ops.layout_ops.Reshard``, provenance "user"): one on
each input before ``fn`` runs, one on each output after, and one on each Parameter of ``parameter_plan`` (a
constraint on a Parameter fixes the layout it is stored in: ``planner.passes.parameters``). The planner propagates
from them as from any ``shard()`` hint, so the ops of ``fn`` get the strategies that move the least data between
those layouts.

What is not MindSpore's: an ``in_strategy``/``out_strategy`` entry of ``None`` (MindSpore: data parallel) leaves
that input or output to propagation (a network's inputs already arrive split by ``dataset_strategy``), said once
when ``shard`` is called; ``device`` and ``level`` are checked (MindSpore does not use them either: ``level`` 0
only, any device name) and have no effect.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphpar._logging import notice_once
from graphpar.common.tensor import Tensor
from graphpar.errors import StrategyError
from graphpar.ops.layout_ops import Reshard
from graphpar.planner.layout import Layout

_DEVICES = ("Ascend", "GPU", "CPU")


@dataclass(frozen=True)
class ShardSpec:
    """A checked ``shard()`` call: per input and output a ``Layout``, a tuple of ints or None; ``parameter_plan``
    as (Parameter name, layout) pairs (hashable: it lives in the Cell's static structure)."""

    in_strategy: tuple
    out_strategy: tuple | None
    parameter_plan: tuple[tuple[str, Any], ...]


def _entry(what: str, i: int, entry: Any) -> Any:
    if entry is None or isinstance(entry, Layout):
        if isinstance(entry, Layout) and entry.entries is None:
            raise StrategyError("shard", entry, f"{what}[{i}] is a Layout without its tensor map",
                                hint="Call it with one alias per dimension, e.g. layout('dp', 'None')")
        return entry
    if isinstance(entry, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in entry):
        return entry
    raise StrategyError("shard", entry, f"{what}[{i}] must be a called Layout, a tuple of positive ints (one split "
                        f"per dimension) or None, got {type(entry).__name__} {entry!r}",
                        hint="e.g. in_strategy=(layout('dp', 'None'), (2, 4))")


def check_shard(in_strategy: Any, out_strategy: Any = None, parameter_plan: Any = None, device: Any = "Ascend",
                level: Any = 0) -> ShardSpec:
    """The arguments of ``shard()`` checked as MindSpore checks them (TypeError for a wrong type)."""
    if not isinstance(in_strategy, tuple):
        raise TypeError(f"shard(): in_strategy must be a tuple (one entry per input), got "
                        f"{type(in_strategy).__name__}")
    if not isinstance(out_strategy, (tuple, type(None))):
        raise TypeError(f"shard(): out_strategy must be None or a tuple, got {type(out_strategy).__name__}")
    if not isinstance(parameter_plan, (dict, type(None))):
        raise TypeError(f"shard(): parameter_plan must be None or a dict {{parameter name: layout}}, got "
                        f"{type(parameter_plan).__name__}")
    if not isinstance(device, str):
        raise TypeError(f"shard(): device must be a str, got {type(device).__name__}")
    if device not in _DEVICES:
        raise ValueError(f"shard(): device must be one of {_DEVICES}, got {device!r}")
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"shard(): level must be an int, got {type(level).__name__}")
    if level != 0:
        raise ValueError(f"shard(): level {level} is not built; 0 (the only level MindSpore uses) plans by sharding "
                         "propagation")
    ins = tuple(_entry("in_strategy", i, e) for i, e in enumerate(in_strategy))
    outs = None if out_strategy is None else tuple(_entry("out_strategy", i, e) for i, e in enumerate(out_strategy))
    plan = []
    for name, layout in (parameter_plan or {}).items():
        if not isinstance(name, str) or not isinstance(layout, (tuple, Layout)):  # MindSpore's TypeError, None too
            raise TypeError(f"shard(): parameter_plan[{name!r}]: For 'Shard', the type of each key and value in "
                            "'parameter_plan' must be str and tuple/Layout (a Parameter name and its layout), but got "
                            f"{type(name).__name__} and {type(layout).__name__}")
        plan.append((name.removeprefix("self."), _entry(f"parameter_plan[{name!r}]", 0, layout)))
    if any(e is None for e in ins + (outs or ())):
        notice_once("shard-none", "shard(): an in_strategy/out_strategy entry of None leaves that input or output "
                    "to sharding propagation (MindSpore reads it as data parallel)")
    return ShardSpec(ins, outs, tuple(plan))


def resolve_parameters(spec: ShardSpec, params: Mapping[str, Any]) -> ShardSpec:
    """``spec`` with each ``parameter_plan`` name (a Parameter's name, or its attribute path in the Cell) turned
    into the attribute path (``params``: the Cell's Parameters by path), which stays valid when the Cell is later
    assigned to a parent and its Parameters are renamed. MindSpore skips an unknown name with a warning; graphpar
    refuses it. Each layout is checked against its Parameter's shape now, as MindSpore's ``Cell.shard`` checks it."""
    names = {**{p.name: n for n, p in params.items()}, **{n: n for n in params}}
    plan = []
    for name, layout in spec.parameter_plan:
        if name not in names:
            raise StrategyError("shard", name, f"parameter_plan names '{name}', which is not a Parameter of the "
                                "sharded Cell", hint=f"Use one of {sorted(set(names))}")
        _check_parameter_layout(name, tuple(params[names[name]].shape), layout)
        plan.append((names[name], layout))
    return ShardSpec(spec.in_strategy, spec.out_strategy, tuple(plan))


def _check_parameter_layout(name: str, shape: tuple[int, ...], layout: Any) -> None:
    """MindSpore's ``Shard._check_layout_is_valid``: one split per dimension of the Parameter, each dividing it."""
    splits = layout if isinstance(layout, tuple) else tuple(math.prod(layout.size(a) for a in entry)
                                                            for entry in layout.entries)
    if len(splits) != len(shape):
        raise StrategyError("shard", layout, f"parameter_plan['{name}']: the length of param_strategy: {len(splits)}, "
                            f"is not equal to param_shape len: {len(shape)}",
                            hint=f"Give one split per dimension of '{name}' (shape {shape})")
    for i, (size, split) in enumerate(zip(shape, splits)):
        if size % split:
            raise StrategyError("shard", layout, f"For '{name}', the param_shape is {shape} and the setting "
                                f"param_strategy is {splits}. The param_shape[{i}]: {size} cannot be divisible by "
                                f"param_strategy[{i}]: {split}", hint=f"Split dimension {i} by a divisor of {size}")


def _pin(value: Any, layout: Any) -> Any:
    if layout is None:
        return value
    if not isinstance(value, Tensor):  # a jax.Array or a Parameter
        raise StrategyError("shard", layout, f"a layout is given for an input or output that is not a tensor "
                            f"({type(value).__name__})", hint="Write None for it")
    return Reshard(layout).set_prim_instance_name("shard")(value)


def call_sharded(spec: ShardSpec, fn: Callable, params: dict[str, Any], args: tuple) -> Any:
    """``fn(*args)`` with its inputs, outputs and the Parameters of ``spec.parameter_plan`` pinned (``params``: the
    Parameters ``fn`` may read, by attribute path; see :func:`resolve_parameters`)."""
    if len(spec.in_strategy) != len(args):
        raise StrategyError("shard", spec.in_strategy, f"in_strategy has {len(spec.in_strategy)} entries but the "
                            f"function was called with {len(args)} inputs", hint="Give one entry per input")
    for path, layout in spec.parameter_plan:
        Reshard(layout).set_prim_instance_name("parameter_plan")(params[path])
    out = fn(*(_pin(a, s) for a, s in zip(args, spec.in_strategy)))
    if spec.out_strategy is None:
        return out
    leaves = out if isinstance(out, tuple) else (out,)
    if len(leaves) != len(spec.out_strategy):
        raise StrategyError("shard", spec.out_strategy, f"out_strategy has {len(spec.out_strategy)} entries but "
                            f"the function returned {len(leaves)} outputs", hint="Give one entry per output")
    pinned = tuple(_pin(v, s) for v, s in zip(leaves, spec.out_strategy))
    return pinned if isinstance(out, tuple) else pinned[0]
