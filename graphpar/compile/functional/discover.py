"""The Cells a Python function reaches through its free variables, as MindSpore's graph compiler resolves them.

MindSpore compiles a ``@jit`` function by resolving every name it reads (closure cells, module globals, default
arguments, the attributes of a method's ``self``) and, for a Cell, its Parameters; that is how the Parameters of a ``net`` the
step never receives as an argument become inputs of the compiled graph. :func:`reachable_cells` does the same walk:
functions are followed into the code objects they contain (nested functions, lambdas, comprehensions), their
closures and the globals they name; bound methods into their object's attributes; ``functools.partial`` into its function and
arguments; lists, tuples and dicts into their items; a Cell is collected and not entered (its whole tree is one
piece of state), and so is a Variable found outside a Cell. Any other object is left alone: state kept on a plain
object is reached only through a method of that object.

MindSpore resolves these names when it compiles and keeps the graph (``jit``'s ``hash_args`` names the free
variables whose change should recompile it). graphpar records every name it resolved and checks them on each call
(:func:`bindings_hold`, a few identity tests): a global, closure variable or attribute rebound to another network or
optimizer makes the next call capture the step again, rather than train the objects it no longer names.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator, Sequence
from typing import Any

from flax import nnx

from graphpar.nn.cell import Cell

_MAX_DEPTH = 12  # functions calling functions calling ...: a bound on the walk, far beyond a training script's


def _code_names(code: types.CodeType) -> Iterator[str]:
    """Global names read by ``code`` and the code objects nested in it."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


_EMPTY = object()


def _references(obj: Any, bindings: list[tuple[Any, Any, Any]]) -> Iterator[Any]:
    """The objects ``obj`` refers to, for the kinds the walk enters; each name it resolved is added to
    ``bindings`` as ``(namespace, name, value)`` (a closure cell's namespace is the cell, its name None)."""
    if isinstance(obj, types.MethodType):
        # a method reads its state through self.<name>: the object's attributes are reached, not the object (a
        # training Cell's own tree often holds what NNX cannot split, MindSpore's ParameterTuple of the weights)
        yield obj.__func__
        try:
            attributes = vars(obj.__self__)
        except TypeError:  # an object without a __dict__
            yield obj.__self__
            return
        for name, value in list(attributes.items()):
            bindings.append((attributes, name, value))
            yield value
    elif isinstance(obj, types.FunctionType):
        for cell in obj.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty closure cell (a name bound after the function was made)
                continue
            bindings.append((cell, None, value))
            yield value
        scope = obj.__globals__
        for name in _code_names(obj.__code__):
            value = scope.get(name, _EMPTY)
            if value is not _EMPTY:
                bindings.append((scope, name, value))
                yield value
        yield from obj.__defaults__ or ()
        yield from (obj.__kwdefaults__ or {}).values()
    elif isinstance(obj, functools.partial):
        yield obj.func
        yield from obj.args
        yield from obj.keywords.values()
    elif isinstance(obj, (list, tuple)):
        yield from obj
    elif isinstance(obj, dict):
        yield from obj.values()


def bindings_hold(bindings: Sequence[tuple[Any, Any, Any]]) -> bool:
    """Whether every name the walk resolved still names the same object (a rebound global, closure variable or
    attribute means the function now reaches other state: capture it again)."""
    for namespace, name, value in bindings:
        current = namespace.cell_contents if name is None else namespace.get(name, _EMPTY)
        if current is not value:
            return False
    return True


def reachable_state(*roots: Any) -> tuple[list[Cell], list[nnx.Variable], list[tuple[Any, Any, Any]]]:
    """Every Cell reachable from ``roots`` through free variables, in the order first reached (deterministic: the
    order names appear in the code), every Variable reached outside those Cells (a Parameter kept in a list or
    on a plain object: accumulators, a ParameterTuple of weights), and the names resolved on the way
    (:func:`bindings_hold`)."""
    bindings: list[tuple[Any, Any, Any]] = []
    found: dict[int, Cell] = {}
    loose: dict[int, nnx.Variable] = {}
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if id(obj) in seen or depth > _MAX_DEPTH or isinstance(obj, (types.ModuleType, type)):
            return
        seen.add(id(obj))
        if isinstance(obj, Cell):
            found.setdefault(id(obj), obj)
            return
        if isinstance(obj, nnx.Variable):
            loose.setdefault(id(obj), obj)
            return
        for ref in _references(obj, bindings):
            walk(ref, depth + 1)

    for root in roots:
        walk(root, 0)
    return list(found.values()), list(loose.values()), bindings
