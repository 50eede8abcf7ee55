"""MindSpore's ``args_type_check``: the keyword-argument type check its ``set_context`` (and
``set_cost_model_context``) runs before the function itself, as a ``functools.wraps`` wrapper.

Being a wrapper is part of the API MindSpore's scripts see: ``set_context.__wrapped__`` is the function without the
type check (MindSpore's own tests call ``context.set_context.__wrapped__(device_id=0)``), so graphpar's
``set_context`` has the same shape. The unchecked function still checks every value (graphpar's named errors), as
MindSpore's inner ``set_context`` still validates through its context setters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from graphpar.errors import SettingTypeError

F = TypeVar("F", bound=Callable[..., Any])

# MindSpore 2.x's @args_type_check on set_context, for the keys graphpar's set_context knows
SET_CONTEXT_TYPES: dict[str, type | tuple[type, ...]] = {
    "mode": int, "device_target": str, "device_id": int, "save_graphs": (bool, int), "save_graphs_path": str,
    "max_device_memory": str, "disable_format_transform": bool}


def _type_names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))


def args_type_check(api: str, **types: type | tuple[type, ...]) -> Callable[[F], F]:
    """A keyword given a value (not None) that is not an instance of its type is a :class:`SettingTypeError` (a
    ``TypeError``, as MindSpore raises) before ``fn`` runs; ``fn`` stays reachable as ``__wrapped__``."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            for key, value in kwargs.items():
                kind = types.get(key)
                if kind is not None and value is not None and not isinstance(value, kind):
                    raise SettingTypeError(api, key, value, reason=f"{key} must be {_type_names(kind)}, got "
                                                                   f"{type(value).__name__}")
            return fn(*args, **kwargs)
        return checked  # type: ignore[return-value]
    return decorate
