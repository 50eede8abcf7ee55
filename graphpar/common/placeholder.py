"""MindSpore's dynamic-shape placeholders: ``Tensor(shape=[None, 64], dtype=ms.int32)`` and ``Cell.set_inputs``.

A placeholder has a shape and a dtype and no data: ``None`` (or ``-1``) marks a *dynamic* dimension whose size is
known only when the network is called. MindSpore compiles a network once for such a signature
(``net.set_inputs(x, y)``, or the placeholders given to ``_cell_graph_executor.compile``) and runs it on any size in
those dimensions. graphpar plans the signature once, as JAX's shape polymorphism sees it: each dynamic dimension is a
symbol (``jax.export.symbolic_shape``), so a trace learns which dimension of every op's input depends on it (see
``graphpar.compile.plans.dynamic``). XLA still compiles static shapes: a call with concrete tensors compiles that
shape (checked against the signature here, :func:`check_call`).

A dimension may be a :class:`~graphpar.common.symbol.Symbol` (``Tensor(shape=[Symbol(divisor=8), 64])``): dynamic,
with what is known of its size, which the symbolic trace, the plan and :func:`check_call` all read.

A placeholder is no ``jax.Array`` (it holds no value): it answers ``shape`` (``-1`` for a dynamic dimension, as
MindSpore's ``Tensor.shape``), ``dtype``, ``ndim`` and ``isinstance(p, Tensor)``; asking it for a value is a named
error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from graphpar.common.symbol import Symbol
from graphpar.errors import DynamicShapeError, InputSignatureError


def is_dynamic_shape(shape: Sequence[Any]) -> bool:
    """Whether ``shape`` (a ``Tensor(shape=...)`` argument) has a dynamic dimension: ``None``, a negative int or a
    :class:`~graphpar.common.symbol.Symbol`."""
    return any(d is None or isinstance(d, Symbol) or (isinstance(d, (int, np.integer)) and d < 0) for d in shape)


@dataclass(frozen=True)
class DynamicTensor:
    """``Tensor(shape=[None, 64], dtype=...)``: a shape with dynamic dimensions (``-1``) and a dtype, no data.
    ``symbols``: per dimension, the ``Symbol`` a dynamic one was given (``Tensor(shape=[Symbol(divisor=8), 64])``),
    else None (a plain dynamic dimension, or a static one)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    symbols: tuple[Symbol | None, ...] = ()

    @classmethod
    def of(cls, shape: Sequence[Any], dtype: Any, symbols: Sequence[Symbol | None] = ()) -> "DynamicTensor":
        dims, syms = [], list(symbols) or [None] * len(shape)
        for j, d in enumerate(shape):
            if isinstance(d, Symbol):
                dims.append(-1)
                syms[j] = d
            elif d is None or (isinstance(d, (int, np.integer)) and d < 0):
                dims.append(-1)
            elif isinstance(d, (int, np.integer)) and not isinstance(d, bool):
                dims.append(int(d))
            else:
                raise DynamicShapeError(list(shape), f"dimension {d!r} is neither an int, None nor a Symbol")
        return cls(tuple(dims), np.dtype(jax.dtypes.canonicalize_dtype(dtype or np.float32)), tuple(syms))

    def symbol(self, d: int) -> Symbol | None:
        """The Symbol of dimension ``d``, or None."""
        return self.symbols[d] if d < len(self.symbols) else None

    def scaled(self, factors: Sequence[int], memo: dict[tuple[int, int], Symbol]) -> "DynamicTensor":
        """This placeholder as ``factors`` times its dimensions (one rank's part to the global shape): a dynamic
        dimension stacked ``f > 1`` times is ``f`` times its Symbol (a plain one: ``Symbol(divisor=f)``), as
        MindSpore's ``ParallelSymbolInfo`` scales a graph input's symbols by the dataset split. ``memo`` keeps a
        unique Symbol shared across the scaled inputs."""
        shape, syms = [], []
        for d, (n, f) in enumerate(zip(self.shape, factors)):
            sym = self.symbol(d)
            shape.append(n * f if n >= 0 else -1)
            if n < 0 and f > 1:
                sym = Symbol(divisor=f) if sym is None else memo.setdefault((id(sym), f), sym.scaled(f))
            syms.append(sym)
        return DynamicTensor(tuple(shape), self.dtype, tuple(syms))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dynamic_dims(self) -> tuple[int, ...]:
        """The positions of the dynamic dimensions."""
        return tuple(i for i, d in enumerate(self.shape) if d < 0)

    def dim(self) -> int:
        return self.ndim

    def asnumpy(self) -> Any:
        raise DynamicShapeError(list(self.shape), "a placeholder holds no data: it describes the inputs a compile "
                                "is planned for; call the network with real tensors for values")

    numpy = asnumpy

    def __repr__(self) -> str:
        shape = [repr(self.symbol(d)) if n < 0 and self.symbol(d) is not None else n for d, n in enumerate(self.shape)]
        return f"Tensor(shape=[{', '.join(map(str, shape))}], dtype={self.dtype.name}, value=None)"


def has_dynamic(args: Sequence[Any]) -> bool:
    """Whether a placeholder among ``args`` has a dynamic dimension (a signature of static placeholders, as
    ``set_inputs`` keeps concrete tensors, is planned as those shapes)."""
    return any(isinstance(a, DynamicTensor) and a.dynamic_dims for a in jax.tree.leaves(tuple(args)))


def as_avals(args: Sequence[Any]) -> list[Any]:
    """``args`` with each placeholder without a dynamic dimension as a ``jax.ShapeDtypeStruct``."""
    return [jax.ShapeDtypeStruct(a.shape, a.dtype) if isinstance(a, DynamicTensor) and not a.dynamic_dims else a
            for a in args]


def _symbol_key(i: int, d: int, sym: Symbol) -> str:
    """The JAX symbol of a Symbol dimension: one per unique Symbol object (its dimensions equal), else one per
    dimension (``sym`` names mark them: ``dynamic_divisors`` reads which dimensions a Symbol constrains)."""
    return f"sym{sym.id}" if sym.unique else f"sym{i}_{d}"


def _symbol_constraints(name: str, sym: Symbol) -> list[str]:
    expr = f"{sym.divisor}*{name} + {sym.remainder}"
    out = [f"{expr} >= {sym.lower}"] if sym.lower > sym.divisor + sym.remainder else []
    return out + ([f"{expr} <= {sym.upper}"] if sym.upper is not None else [])


def symbolic_avals(args: Sequence[Any], shared: bool = False) -> list[Any]:
    """``args`` with each placeholder as a ``jax.ShapeDtypeStruct`` whose dynamic dimensions are symbols of one
    symbolic scope; other leaves unchanged. Each dynamic dimension its own symbol (``a{i}_{d}``: input ``i``,
    dimension ``d``), as MindSpore's ``-1`` are independent; with ``shared``, one symbol per dimension position
    (``d{d}``: the batch of the data and of the label the same size), for a network that combines them (a loss
    subtracting the label from the output needs them equal, which MindSpore checks only when it runs). A
    ``Symbol`` dimension is ``divisor*k + remainder`` over its own symbol ``k`` (shared by the dimensions of one
    unique Symbol), with its ``min`` / ``max`` as JAX shape constraints."""
    leaves, treedef = jax.tree.flatten(tuple(args))
    names: dict[str, Symbol | None] = {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, DynamicTensor):
            for d in leaf.dynamic_dims:
                sym = leaf.symbol(d)
                key = _symbol_key(i, d, sym) if sym is not None else f"d{d}" if shared else f"a{i}_{d}"
                names.setdefault(key, sym)
    constraints = [c for key, sym in names.items() if sym is not None for c in _symbol_constraints(key, sym)]
    symbols = dict(zip(names, jax.export.symbolic_shape(", ".join(names), constraints=constraints))) if names \
        else {}
    out = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, DynamicTensor):
            shape = []
            for d, n in enumerate(leaf.shape):
                sym = leaf.symbol(d)
                if n >= 0:
                    shape.append(n)
                elif sym is not None:
                    shape.append(sym.divisor * symbols[_symbol_key(i, d, sym)] + sym.remainder)
                else:
                    shape.append(symbols[f"d{d}" if shared else f"a{i}_{d}"])
            leaf = jax.ShapeDtypeStruct(tuple(shape), leaf.dtype)
        out.append(leaf)
    return list(jax.tree.unflatten(treedef, out))


def _standin(sym: Symbol | None, size: int, device_num: int) -> int:
    """The size a dynamic dimension is planned at: ``size`` (a plain one), or for a Symbol a ``divisor * N +
    remainder`` its ``min`` / ``max`` allow that no split (a divisor of ``device_num``) divides unless the Symbol
    makes it divide every size (``gcd(divisor, remainder)``), so the planner splits it only as every call allows."""
    if sym is None:
        return size
    known = math.gcd(sym.divisor, sym.remainder)
    splits = [g for g in range(2, device_num + 1) if device_num % g == 0]
    first = max(1, -(-(max(size, sym.lower) - sym.remainder) // sym.divisor))
    last = (sym.upper - sym.remainder) // sym.divisor if sym.upper is not None else first + 64 * device_num
    for n in [*range(first, last + 1), *range(max(1, first - 1), 0, -1)]:
        value = sym.divisor * n + sym.remainder
        if value >= sym.lower and all((value % g == 0) == (known % g == 0) for g in splits):
            return value
    return sym.divisor * first + sym.remainder


def standin_avals(args: Sequence[Any], size: int, device_num: int = 1) -> list[Any]:
    """``args`` with each placeholder as a ``jax.ShapeDtypeStruct`` whose dynamic dimensions are ``size`` (a Symbol
    dimension: a size its Symbol admits, divisible as it says, :func:`_standin`)."""
    return [jax.ShapeDtypeStruct(tuple(_standin(a.symbol(j), size, device_num) if d < 0 else d
                                       for j, d in enumerate(a.shape)), a.dtype)
            if isinstance(a, DynamicTensor) else a for a in args]


_TENSORS = (DynamicTensor, jax.Array, np.ndarray)


def signature_of(cell: str, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """``Cell.set_inputs(*inputs)``'s signature: each tensor as a placeholder (its shape, ``-1`` where dynamic, and
    dtype: the signature keeps no data), any other input (a Python number or tuple, a compile-time constant in
    MindSpore's graph mode) as given."""
    if not inputs:
        raise InputSignatureError(cell, "set_inputs() needs the network's inputs: Tensor(shape=[None, ...], "
                                  "dtype=...) placeholders or tensors, one per construct argument")
    return tuple(x if isinstance(x, DynamicTensor) else DynamicTensor.of(x.shape, x.dtype)
                 if isinstance(x, _TENSORS) else x for x in inputs)


def check_call(cell: str, signature: Sequence[Any], args: Sequence[Any]) -> None:
    """A call's arguments against ``set_inputs``' signature, as MindSpore checks them: the same number of inputs,
    each tensor of the signature's rank and dtype, with the signature's size in every static dimension (a dynamic
    dimension takes any size; a ``Symbol`` dimension a size its Symbol admits, the same size wherever one unique
    Symbol stands)."""
    if len(args) != len(signature):
        raise InputSignatureError(cell, f"called with {len(args)} inputs where set_inputs() gave {len(signature)}")
    seen: dict[int, tuple[int, int, int]] = {}  # a unique Symbol's id -> (input, dimension, size) first given
    for i, (want, got) in enumerate(zip(signature, args)):
        if not isinstance(want, _TENSORS) or not isinstance(got, _TENSORS):
            continue
        expect = tuple(want.shape)
        shape = tuple(got.shape)
        if len(shape) != len(expect) or any(w >= 0 and w != g for w, g in zip(expect, shape)):
            raise InputSignatureError(cell, f"input {i} has shape {list(shape)}, which does not match "
                                      f"set_inputs()' {list(expect)} (-1: any size; every other dimension as given)")
        if np.dtype(got.dtype) != np.dtype(want.dtype):
            raise InputSignatureError(cell, f"input {i} has dtype {np.dtype(got.dtype).name} where set_inputs() "
                                      f"gave {np.dtype(want.dtype).name}")
        if isinstance(want, DynamicTensor):
            _check_symbols(cell, i, want, shape, seen)


def _check_symbols(cell: str, i: int, want: DynamicTensor, shape: tuple[int, ...],
                   seen: dict[int, tuple[int, int, int]]) -> None:
    for d, size in enumerate(shape):
        sym = want.symbol(d) if want.shape[d] < 0 else None
        if sym is None or size < 0:  # a plain dynamic dimension, or a placeholder compiled as the signature
            continue
        why = sym.admits(int(size))
        if why is not None:
            raise InputSignatureError(cell, f"input {i}'s dimension {d} has size {size}, which its {sym!r} in "
                                      f"set_inputs() does not admit: {why}")
        if sym.unique:
            first = seen.setdefault(sym.id, (i, d, int(size)))
            if first[2] != size:
                raise InputSignatureError(cell, f"input {i}'s dimension {d} has size {size} where input {first[0]}'s "
                                          f"dimension {first[1]} has {first[2]}: set_inputs() gave both one unique "
                                          f"{sym!r}, so they must be equal")
