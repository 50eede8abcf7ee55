"""MindSpore's Parameter-updating scatter primitives, with MindSpore's arguments and in-place semantics:

* ``ScatterUpdate(use_locking=True)(input_x, indices, updates)``: rows ``indices`` of ``input_x`` (dim 0) set to
  ``updates`` (shape ``indices.shape + input_x.shape[1:]``); ``ScatterAdd``, ``ScatterSub``, ``ScatterMul``,
  ``ScatterDiv``, ``ScatterMin``, ``ScatterMax`` (``use_locking=False``) combine them instead (repeated indices
  accumulate);
* ``ScatterNdUpdate(use_locking=True)``, ``ScatterNdAdd``/``ScatterNdSub`` (``use_locking=False``)``(input_x,
  indices, updates)``: ``indices`` (..., K) address the first K dims of ``input_x``; ``updates``
  (``indices.shape[:-1] + input_x.shape[K:]``) are set, added or subtracted there.

As in MindSpore, ``input_x`` is a Parameter and is updated in place: the op returns the new value and, given a
Parameter, writes it back (inside a Cell, as ``BatchNorm``'s moving statistics: the compiled step's new state).
``use_locking`` orders concurrent updates on MindSpore's devices; one JAX program has no concurrent writers, so it
changes nothing. Sharding (``graphpar.planner.rules.scatter_rules``) follows MindSpore's ScatterUpdateInfo and
ScatterMathOpsInfo / ScatterNdOpsInfo: the indices are never split; ``input_x``'s dims past the indexed ones split
alike with ``updates``' matching dims; ScatterUpdate keeps the indexed dim 0 whole, the others may split the
indexed dims (each device applies the updates that fall in its rows).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from flax import nnx

from graphpar.ops.primitive import Primitive


class _ParameterScatter(Primitive):
    input_names = ("input_x", "indices", "updates")

    def __init__(self, use_locking: bool = False):
        if not isinstance(use_locking, bool):
            raise TypeError(f"{type(self).__name__}: use_locking must be a bool, got {use_locking!r}")
        super().__init__(use_locking=use_locking)

    def __call__(self, input_x: Any, indices: Any, updates: Any) -> Any:
        out = super().__call__(input_x, indices, updates)
        if isinstance(input_x, nnx.Variable):
            input_x.set_value(out)
        return out

    def _rows(self, x, indices, updates, depth: int):
        want = tuple(indices.shape[:indices.ndim - (depth > 0)]) + tuple(x.shape[max(depth, 1):])
        if not jnp.issubdtype(indices.dtype, jnp.integer) or tuple(updates.shape) != want:
            raise ValueError(f"{self.name}: indices must be integers and updates of shape {want} (indices "
                             f"{tuple(indices.shape)}, input_x {tuple(x.shape)}), got updates {tuple(updates.shape)}")
        if depth:
            return x.at[tuple(jnp.moveaxis(indices, -1, 0))], updates.astype(x.dtype)
        return x.at[indices], updates.astype(x.dtype)


class _RowScatter(_ParameterScatter):
    """One of the dim-0 scatters: ``_apply(at, values)`` combines the updates into the addressed rows."""

    def compute(self, x, indices, updates):
        at, values = self._rows(x, indices, updates, 0)
        return type(self)._apply(at, values)

    @staticmethod
    def _apply(at, values):
        raise NotImplementedError


class _NdScatter(_ParameterScatter):
    """One of the N-D scatters: ``indices`` (..., K) address the first K dims of ``input_x``."""

    def compute(self, x, indices, updates):
        depth = indices.shape[-1]
        if not 1 <= depth <= x.ndim:
            raise ValueError(f"{self.name}: indices' last dim ({depth}) must address 1 to {x.ndim} dims of input_x")
        at, values = self._rows(x, indices, updates, depth)
        return type(self)._apply(at, values)

    @staticmethod
    def _apply(at, values):
        raise NotImplementedError


_COMBINE = {"Update": lambda at, v: at.set(v), "Add": lambda at, v: at.add(v),
            "Sub": lambda at, v: at.subtract(v), "Mul": lambda at, v: at.multiply(v),
            "Div": lambda at, v: at.divide(v), "Min": lambda at, v: at.min(v), "Max": lambda at, v: at.max(v)}
_WHAT = {"Update": "set to", "Add": "plus", "Sub": "minus", "Mul": "times", "Div": "divided by",
         "Min": "the minimum with", "Max": "the maximum with"}


def _scatter_class(name: str, base: type, how: str, locking: bool) -> type:
    where = "rows ``indices``" if base is _RowScatter else "the positions ``indices`` address"
    doc = (f"``{name}(use_locking={locking})(input_x, indices, updates)``: ``input_x`` with {where} "
           f"{_WHAT[how]} ``updates``, written back to a Parameter ``input_x``.")

    def __init__(self, use_locking: bool = locking):
        base.__init__(self, use_locking)

    return type(name, (base,), {"__doc__": doc, "__module__": __name__, "__qualname__": name,
                                "__init__": __init__, "_apply": staticmethod(_COMBINE[how])})


ScatterUpdate = _scatter_class("ScatterUpdate", _RowScatter, "Update", True)
ScatterAdd = _scatter_class("ScatterAdd", _RowScatter, "Add", False)
ScatterSub = _scatter_class("ScatterSub", _RowScatter, "Sub", False)
ScatterMul = _scatter_class("ScatterMul", _RowScatter, "Mul", False)
ScatterDiv = _scatter_class("ScatterDiv", _RowScatter, "Div", False)
ScatterMin = _scatter_class("ScatterMin", _RowScatter, "Min", False)
ScatterMax = _scatter_class("ScatterMax", _RowScatter, "Max", False)
ScatterNdUpdate = _scatter_class("ScatterNdUpdate", _NdScatter, "Update", True)
ScatterNdAdd = _scatter_class("ScatterNdAdd", _NdScatter, "Add", False)
ScatterNdSub = _scatter_class("ScatterNdSub", _NdScatter, "Sub", False)
