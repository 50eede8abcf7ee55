"""Structural checks of ``shard()`` strategies: the part that needs no shapes and no devices.

A strategy is a tuple with one tuple per tensor input; each entry is a positive int that splits that dimension. A
strategy of the wrong type (a list, a float split) is a :class:`~graphpar.errors.StrategyTypeError`, a ``TypeError``
as in MindSpore's ``Primitive.shard``; a wrong value (a split of 0, the wrong number of entries) a ``StrategyError``.
MindSpore 2.x also takes a tuple of ``Layout`` objects (``(layout("dp", "mp"), layout("mp", "None"))``), one per
tensor input, each called with its tensor map; ``out_strategy`` is then written with layouts too.
Checks that need input shapes (rank, divisibility) run at trace time (``check_ranks``); checks that need the device
count run when the plan is made (``graphpar.parallel``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphpar.errors import StrategyError, StrategyTypeError
from graphpar.planner.layout import Layout, is_layout_strategy

Strategy = tuple[tuple[int, ...], ...]


def _example(n_inputs: int | None) -> str:
    if n_inputs == 1:
        return "((2, 4),)"
    if n_inputs == 2:
        return "((2, 4), (4, 1))"
    if n_inputs:
        return "(" + ", ".join(["(2, 1)"] * n_inputs) + ")"
    return "((2, 4), (4, 1))"


def check_structure(op: str, strategy: Any, n_inputs: int | None, what: str = "in_strategy",
                    input_names: Sequence[str] | None = None) -> Strategy:
    """Validate nesting and values of ``strategy``; return it unchanged (as tuples) when valid.

    ``n_inputs`` is the op's number of tensor inputs, or ``None`` for variadic ops (checked at trace time).
    """
    example = _example(n_inputs)
    names = f" ({', '.join(input_names)})" if input_names else ""
    if is_layout_strategy(strategy):
        return _check_layouts(op, strategy, n_inputs, what, names)
    if isinstance(strategy, tuple) and any(isinstance(e, Layout) for e in strategy):
        raise StrategyError(op, strategy, f"{what} mixes Layout objects and tuples of ints",
                            hint="Write every entry as a called Layout (layout('dp', 'None')) or every entry as a "
                                 f"tuple of ints, e.g. {example}")
    if not isinstance(strategy, tuple):
        raise StrategyTypeError(op, strategy, f"{what} must be a tuple of tuples, got {type(strategy).__name__}",
                            hint=f"Write it with tuples, one per input{names}, e.g. {example}")
    for i, entry in enumerate(strategy):
        if not isinstance(entry, tuple):
            raise StrategyTypeError(
                op, strategy, f"{what}[{i}] must be a tuple (one split per dimension of input {i}), got "
                f"{type(entry).__name__} {entry!r}",
                hint=f"Nest one tuple per input{names}, e.g. {example}; a single-input op takes ((8, 1),)")
        for d in entry:
            if isinstance(d, bool) or not isinstance(d, int):
                raise StrategyTypeError(op, strategy, f"{what}[{i}] holds {d!r} ({type(d).__name__}); every split "
                                    "must be a positive int", hint=f"e.g. {example}")
            if d <= 0:
                raise StrategyError(op, strategy, f"{what}[{i}] holds the split {d}; every split must be a "
                                    "positive int (1 means not split)", hint=f"e.g. {example}")
    if n_inputs is not None and what == "in_strategy" and len(strategy) != n_inputs:
        raise StrategyError(op, strategy, f"{op} takes {n_inputs} tensor input(s){names} but the strategy has "
                            f"{len(strategy)} entr{'y' if len(strategy) == 1 else 'ies'}",
                            hint=f"Give one tuple per input, e.g. {example}")
    return strategy


def _check_layouts(op: str, strategy: tuple, n_inputs: int | None, what: str, names: str) -> tuple:
    for i, layout in enumerate(strategy):
        if layout.entries is None:
            raise StrategyError(op, strategy, f"{what}[{i}] is a Layout without its tensor map",
                                hint="Call the layout with one alias (or 'None') per dimension, e.g. "
                                     "layout('dp', 'None')")
    if n_inputs is not None and what == "in_strategy" and len(strategy) != n_inputs:
        raise StrategyError(op, strategy, f"{op} takes {n_inputs} tensor input(s){names} but the strategy has "
                            f"{len(strategy)} layouts", hint="Give one layout per input")
    return strategy


def entry_rank(entry: tuple | Layout) -> int:
    """How many dimensions a strategy entry describes: a tuple's length, a layout's tensor-map length."""
    return len(entry.entries) if isinstance(entry, Layout) else len(entry)


def check_ranks(op: str, scope: str, strategy: Strategy, shapes: Sequence[tuple[int, ...]],
                input_names: Sequence[str]) -> None:
    """At trace time: one entry per tensor input, each as long as that input's rank."""
    if len(strategy) != len(shapes):
        raise StrategyError(op, strategy, f"the op received {len(shapes)} tensor input(s) with shapes "
                            f"{list(shapes)} but the strategy has {len(strategy)} entries", scope=scope,
                            hint="Give one tuple per tensor input")
    for i, (entry, shape) in enumerate(zip(strategy, shapes)):
        if entry_rank(entry) != len(shape):
            name = input_names[i] if i < len(input_names) else f"input {i}"
            ones = tuple([1] * len(shape))
            raise StrategyError(op, strategy, f"entry {i} {entry} has {entry_rank(entry)} split(s) but {name} has rank "
                                f"{len(shape)} (shape {tuple(shape)})", scope=scope,
                                hint=f"Give one split per dimension, e.g. {ones} for no split")
