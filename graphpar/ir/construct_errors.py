"""Turning JAX's trace-time errors inside a Cell's ``construct`` into graphpar errors that name the culprit.

While a network is traced, a mistake in ``construct`` surfaces as a JAX error deep inside ``jax.make_jaxpr``: a
``TypeError`` from a primitive's shape rule (``dot_general requires contracting dimensions to have the same
shape``), or a ``ConcretizationTypeError`` when Python control flow asks for a traced value (``if h.sum() > 0:``).
Neither names the op instance, the Cell or the shapes involved. This module holds the one translation, called where
the culprit is known: by an op's traced call (the op instance, its scope, its input shapes) and by a Cell's scope
(the innermost Cell, for errors outside any op). An error already translated passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from graphpar.errors import CellError, GraphparError


class ConstructError(CellError):
    """An error while tracing a Cell's ``construct``. Fields: ``scope`` (Cell scope), ``op`` (op instance name and
    kind, when the error is an op's), ``shapes`` (the op's input shapes by name), ``reason`` (JAX's own words)."""

    def __init__(self, message: str, scope: str, reason: str, op: str | None = None,
                 shapes: dict[str, tuple] | None = None):
        self.scope, self.reason, self.op, self.shapes = scope, reason, op, shapes or {}
        super().__init__(message)


class OpShapeError(ConstructError):
    """An op whose inputs do not fit each other (shapes, dtypes) as its shape rule requires."""


class ControlFlowError(ConstructError):
    """A value only known when the step runs used as a Python value (``bool()``/``int()``, an ``if`` in a helper
    function; an ``if`` in ``construct`` itself is compiled, ``ir.control_flow``)."""


_CONCRETE = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
             jax.errors.TracerIntegerConversionError)


# words of JAX's shape-rule TypeErrors, to tell them from a TypeError in the user's own Python code
_SHAPE_RULE_WORDS = ("incompatible shapes", "requires contracting", "must have the same shape", "got arrays of",
                     "cannot reshape", "Incompatible shapes", "dimension numbers")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0].rstrip(".") if text else type(exc).__name__


def _shape(value: Any) -> tuple:
    return tuple(getattr(value, "shape", ()))


def _control_flow(exc: BaseException, scope: str, cell: str) -> ControlFlowError:
    return ControlFlowError(
        f"Cell '{cell}' (scope {scope}): construct uses a traced value as a Python value "
        f"({type(exc).__name__}); a graph is compiled once for all data, so bool()/int()/float() of a Tensor "
        "cannot depend on its value (an `if` on a Tensor is compiled in construct and in the functions and methods "
        "of your own code it calls, not in a lambda, code without source or a library's function). Compute both "
        "branches and choose with ops.Select(cond, a, b) or jnp.where(cond, a, b), or move the `if` into construct",
        scope, _first_line(exc))


def for_op(exc: BaseException, op_name: str, kind: str, scope: str, names: Sequence[str],
           inputs: Sequence[Any]) -> BaseException:
    """The error to raise for ``exc``, raised while tracing op ``op_name`` (a ``kind``) on ``inputs``."""
    if isinstance(exc, GraphparError):
        return exc
    cell = scope.rsplit("/", 1)[-1].split("-")[-1] if scope else "?"
    if isinstance(exc, _CONCRETE):
        return _control_flow(exc, scope, cell)
    if not isinstance(exc, (TypeError, ValueError)):
        return exc
    shapes = {name: _shape(value) for name, value in zip(names, inputs)}
    listed = ", ".join(f"{name}{list(shape)}" for name, shape in shapes.items())
    return OpShapeError(
        f"op '{op_name}' ({kind}) in scope {scope}: its inputs do not fit: {listed}: {_first_line(exc)}. Check the "
        "shapes of the Parameters and of the data reaching this op", scope, _first_line(exc),
        f"{op_name} ({kind})", shapes)


def for_cell(exc: BaseException, scope: str, cell: str) -> BaseException:
    """The error to raise for ``exc``, raised in Cell ``cell``'s construct outside any op (raw jnp code, Python
    control flow)."""
    if isinstance(exc, GraphparError):
        return exc
    if isinstance(exc, _CONCRETE):
        return _control_flow(exc, scope, cell)
    if isinstance(exc, (TypeError, ValueError)) and any(m in str(exc) for m in _SHAPE_RULE_WORDS):
        return OpShapeError(f"Cell '{cell}' (scope {scope}): {_first_line(exc)} (in jnp/lax code of its construct). "
                            "Check the shapes of the Parameters and of the data it computes with", scope,
                            _first_line(exc))
    return exc
