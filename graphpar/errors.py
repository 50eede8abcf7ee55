"""Error classes graphpar raises on bad user input.

Every error names its culprit (the op instance, the Cell scope, the strategy, the file, the setting) and says what
would be valid, so a user never has to read a JAX traceback to find their mistake. They subclass the builtin error
a Python user would expect (``ValueError`` for a bad value, ``TypeError`` for a bad type) so existing ``except``
clauses keep working.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def _choices(valid: Iterable[Any]) -> str:
    return ", ".join(repr(v) for v in valid)


class GraphparError(Exception):
    """Base class of every error graphpar raises on purpose."""


class ConfigError(GraphparError, ValueError):
    """A context setting with an unknown name or an invalid value."""

    def __init__(self, api: str, key: str, value: Any = None, valid: Iterable[Any] | None = None,
                 reason: str | None = None):
        self.api, self.key, self.value = api, key, value
        self.valid = list(valid) if valid is not None else None
        if reason is None:
            reason = f"{key}={value!r} is not valid"
        message = f"{api}(): {reason}"
        if self.valid is not None:
            message += f"; valid choices: {_choices(self.valid)}"
        super().__init__(message)


class UnknownSettingError(ConfigError):
    """A keyword that the context API does not know."""

    def __init__(self, api: str, key: str, valid: Iterable[Any]):
        super().__init__(api, key, valid=sorted(valid), reason=f"unknown setting {key!r}")


class StrategyError(GraphparError, ValueError):
    """A ``shard()`` strategy that is malformed or cannot hold on the inputs and devices it meets.

    Fields: ``op`` (instance name or class), ``scope`` (Cell scope, when known), ``strategy`` (what was given) and
    ``reason``; ``hint`` says what would be valid.
    """

    def __init__(self, op: str, strategy: Any, reason: str, scope: str | None = None, hint: str | None = None):
        self.op, self.strategy, self.reason, self.scope, self.hint = op, strategy, reason, scope, hint
        where = f"op '{op}'" + (f" in scope {scope}" if scope else "")
        message = f"{where}: invalid strategy {strategy!r}: {reason}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


class CellError(GraphparError, TypeError):
    """A Cell that is defined or used in a way graphpar cannot run (no construct, duplicate names, ...)."""


class DatasetError(GraphparError, ValueError):
    """A dataset, file or batch that cannot be read or split as asked."""


class DeviceError(GraphparError, ValueError):
    """A device target or device count this machine cannot provide."""


class EnvVarError(GraphparError, ValueError):
    """An environment variable whose value cannot be used (``variable``, ``value``), where it applies."""

    def __init__(self, variable: str, value: str, reason: str):
        self.variable, self.value = variable, value
        super().__init__(f"environment variable {variable}={value!r}: {reason}")


class DeletedArrayError(GraphparError, RuntimeError):
    """A value a train step would read is a deleted array (donated to another jitted function, or ``.delete()``d):
    ``what`` names it (a Parameter, other network state, the optimizer state, an input of the batch). XLA's CPU
    client crashes the process on a donated-away buffer, so it is refused before the call."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(f"the train step's {what} is a deleted array (donated to another jitted function or "
                         "deleted); give it a live value first (Parameter.set_data(...), a fresh batch)")
