"""The objects a Python function reaches through its free variables, as MindSpore's graph compiler resolves them.

MindSpore compiles a function by resolving every name it reads: closure cells, module globals, default arguments
and, through a bound method, its object. :func:`reach` does that walk for the two places that need it: a step's
state (``compile.functional.discover``: the Cells and Parameters a ``graphpar.jit`` function trains) and a traced
``if``'s or loop's state (``ir.control_flow.merge``: what a branch may write). Functions are followed into the code
objects they contain (nested functions, lambdas, comprehensions), their closures, the globals they name and their
default arguments; ``functools.partial`` into its function and arguments; lists, tuples and dicts into their items.
What the caller ``collects`` (a Cell, a Variable) is gathered and not entered; modules and classes are not entered;
any other object is left alone, so state kept on a plain object is reached only through a method of that object
(``method_attributes``: into the object's attributes, or just to the object itself).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 12  # functions calling functions calling ...: a bound on the walk, far beyond a training script's

Binding = tuple[Any, Any, Any]  # (namespace, name, value); a closure cell's namespace is the cell, its name None

_EMPTY = object()


@dataclass(frozen=True)
class Reached:
    """What :func:`reach` found: the collected objects in the order first reached (deterministic: the order names
    appear in the code), and every name resolved on the way (:func:`bindings_hold`)."""

    objects: tuple[Any, ...]
    bindings: tuple[Binding, ...]


def _code_names(code: types.CodeType) -> Iterator[str]:
    """Global names read by ``code`` and the code objects nested in it."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def _references(obj: Any, bindings: list[Binding], method_attributes: bool) -> Iterator[Any]:
    """The objects ``obj`` refers to, for the kinds the walk enters; each name it resolved is added to
    ``bindings``."""
    if isinstance(obj, types.MethodType):
        yield obj.__func__
        try:
            attributes = vars(obj.__self__) if method_attributes else None
        except TypeError:  # an object without a __dict__
            attributes = None
        if attributes is None:
            yield obj.__self__
            return
        # a method reads its state through self.<name>: the object's attributes are reached, not the object (a
        # training Cell's own tree often holds what NNX cannot split, MindSpore's ParameterTuple of the weights)
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


def reach(roots: Sequence[Any], collects: Callable[[Any], bool], method_attributes: bool) -> Reached:
    """The objects reachable from ``roots`` for which ``collects`` holds, each once (see the module docstring);
    ``method_attributes``: whether a bound method leads into its object's attributes (a step's state: the object
    itself is often what NNX cannot split) or to the object itself (a branch's state: a Cell whole, a plain object
    not entered)."""
    bindings: list[Binding] = []
    found: dict[int, Any] = {}
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if id(obj) in seen or depth > MAX_DEPTH or isinstance(obj, (types.ModuleType, type)):
            return
        seen.add(id(obj))
        if collects(obj):
            found.setdefault(id(obj), obj)
            return
        for ref in _references(obj, bindings, method_attributes):
            walk(ref, depth + 1)

    for root in roots:
        walk(root, 0)
    return Reached(tuple(found.values()), tuple(bindings))


def bindings_hold(bindings: Sequence[Binding]) -> bool:
    """Whether every name the walk resolved still names the same object (a rebound global, closure variable or
    attribute means the function now reaches other state: capture it again)."""
    for namespace, name, value in bindings:
        current = namespace.cell_contents if name is None else namespace.get(name, _EMPTY)
        if current is not value:
            return False
    return True
