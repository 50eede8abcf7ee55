"""Per-Cell compute dtypes: what ``Cell.to_float`` sets and what a Cell call does with it.

It lives below ``graphpar.nn`` (which re-exports it as ``graphpar.nn._mixed_precision``) because both a Cell and a
Primitive carry a :class:`CellCast` (``_amp_cast``: a white-listed op under ``amp_level="O1"`` casts its own call):
``Cell.__call__`` runs :func:`call`, ``Primitive.__call__`` :func:`cast_tree`. It knows a Cell only by what it
uses (:class:`CastCell`).

MindSpore's ``cell.to_float(dtype)`` makes the Cell (and every Cell below it) compute in ``dtype``: the floating
inputs of the call, the Cell's own floating Parameters and its constants are cast to ``dtype`` when the Cell runs,
while the Parameters themselves stay float32 (the *master weights* the optimizer updates). graphpar does the same
at the Cell boundary: a Cell carrying a :class:`CellCast` has its floating array arguments cast, its own floating
Parameters read as ``dtype`` for the duration of the call (inside a traced step that is a ``convert_element_type``
in the program, so gradients flow back to the float32 values), and optionally its floating outputs cast to an
output dtype (MindSpore's ``_OutputTo16`` / ``_OutputTo32`` wrappers, kept here as a field so that parameter names
and checkpoints do not change).

A value a Cell assigns to one of its Parameters during the call (BatchNorm's moving statistics) is stored back in
the Parameter's own dtype.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import errors as flax_errors
from flax import nnx

class CastCell(Protocol):
    """What this module uses of a ``graphpar.nn.Cell``: its cast, its Cells and its own Parameters."""

    _amp_cast: CellCast | None

    def cells_and_names(self) -> Iterator[tuple[str, Any]]: ...

    def _own_params(self) -> Iterator[tuple[str, Any]]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


_entered: contextvars.ContextVar[int | None] = contextvars.ContextVar("graphpar_amp_entered", default=None)


@dataclass(frozen=True)
class CellCast:
    """How one Cell's call is cast: ``compute`` for its inputs and own Parameters (None: unchanged), ``output``
    for its floating outputs (None: unchanged). Hashable and static, so it lives in the NNX graph definition."""

    compute: np.dtype | None = None
    output: np.dtype | None = None

    def with_output(self, output: np.dtype | None) -> CellCast:
        return CellCast(self.compute, output)


def is_float(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating)


def cast_tree(tree: Any, dtype: np.dtype | None) -> Any:
    """Every floating array leaf of ``tree`` as ``dtype`` (other leaves unchanged)."""
    if dtype is None:
        return tree

    def one(x: Any) -> Any:
        if isinstance(x, nnx.Variable):
            x = x.get_value()
        return x.astype(dtype) if is_float(x) and x.dtype != dtype else x

    return jax.tree.map(one, tree, is_leaf=lambda v: isinstance(v, nnx.Variable))


def set_compute_dtype(cell: CastCell, dtype: np.dtype | None, recurse: bool = True) -> None:
    """``cell`` (and every Cell below it: ``cells_and_names`` yields Cells only) computes in ``dtype``; outputs
    casts already set are kept."""
    cells = [c for _, c in cell.cells_and_names()] if recurse else [cell]
    for c in cells:
        old = c._amp_cast
        output = old.output if old is not None else None
        c._amp_cast = None if dtype is None and output is None else CellCast(dtype, output)


def set_output_dtype(cell: CastCell, dtype: np.dtype | None) -> None:
    old = cell._amp_cast or CellCast()
    new = old.with_output(dtype)
    cell._amp_cast = None if new == CellCast() else new


def call(cell: CastCell, args: tuple, kwargs: dict) -> Any:
    """Run ``cell(*args, **kwargs)`` under its :class:`CellCast` (called from ``Cell.__call__``)."""
    spec: CellCast = cell._amp_cast
    if spec.compute is not None:
        args, kwargs = cast_tree(args, spec.compute), cast_tree(kwargs, spec.compute)
    swapped = _swap_params(cell, spec.compute)
    token = _entered.set(id(cell))
    try:
        out = cell(*args, **kwargs)
    finally:
        _entered.reset(token)
        _restore_params(swapped)
    return cast_tree(out, spec.output)


def entered(cell: Any) -> bool:
    """Whether ``cell``'s call is already inside :func:`call` (the cast was applied)."""
    return _entered.get() == id(cell)


def _put(param: Any, value: Any) -> None:
    """Store ``value`` in ``param`` for the duration of one call. Inside a traced step the network is merged in the
    trace and NNX's setter works; under ``value_and_grad`` / ``grad`` of a function that closes over Cells the
    Parameters were made outside the trace and hold its tracers (``ops.composite`` swaps them in), and NNX refuses
    that cross-trace update with a ``TraceContextError``: the value slot is then written directly, as
    ``ops.composite`` does. The caller restores the original in a ``finally``, so no tracer outlives the call."""
    try:
        param.set_raw_value(value)
    except flax_errors.TraceContextError:
        object.__setattr__(param, "_raw_value", value)


def _swap_params(cell: CastCell, dtype: np.dtype | None) -> list[tuple[Any, Any, Any]]:
    """Read ``cell``'s own floating Parameters as ``dtype``: (holder, original value, cast value) per swap."""
    if dtype is None:
        return []
    swapped = []
    for _, param in cell._own_params():
        value = param.get_raw_value()
        if is_float(value) and value.dtype != dtype:
            cast = value.astype(dtype)
            _put(param, cast)
            swapped.append((param, value, cast))
    return swapped


def _restore_params(swapped: list[tuple[Any, Any, Any]]) -> None:
    for param, original, cast in swapped:
        now = param.get_raw_value()
        if now is cast:
            _put(param, original)
        else:  # the Cell assigned a new value (moving statistics): keep it, in the Parameter's own dtype
            _put(param, jnp.asarray(now).astype(original.dtype))
