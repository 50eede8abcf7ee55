"""Error classes graphpar raises on bad user input, and the API boundary that shows them with the user's frames.

Every error names its culprit (the op instance, the Cell scope, the strategy, the file, the setting) and says what
would be valid, so a user never has to read a JAX traceback to find their mistake. They subclass the builtin error
a Python user would expect (``ValueError`` for a bad value, ``TypeError`` for a bad type) so existing ``except``
clauses keep working.

A graphpar error is found deep inside graphpar (a shape error while a Cell is traced: ~30 frames of the compile
stack, the tracer and JAX); its traceback would bury the user's own lines. :func:`api_boundary` (on the calls a user
makes: a Cell call, ``Model.train``/``eval``/``predict``) re-raises a :class:`GraphparError` with graphpar's, JAX's
and contextlib's frames taken out of its traceback and of the tracebacks of the errors chained to it, as JAX's own
``traceback_util.api_boundary`` does for JAX's frames: what is left is the user's call site, their ``construct``
lines and the one-line message. Other exceptions (a bug in graphpar) keep every frame.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


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


class SettingTypeError(ConfigError, TypeError):
    """A setting given a value of the wrong type (MindSpore's ``args_type_check`` raises ``TypeError``)."""


class UnknownSettingError(ConfigError):
    """A keyword that the context API does not know."""

    def __init__(self, api: str, key: str, valid: Iterable[Any]):
        super().__init__(api, key, valid=sorted(valid), reason=f"unknown setting {key!r}")


class StrategyError(GraphparError, ValueError, RuntimeError):
    """A ``shard()`` strategy that is malformed or cannot hold on the inputs and devices it meets.

    A ``ValueError`` (a bad value) and a ``RuntimeError``: MindSpore reports a strategy that fails when the network
    is compiled as ``RuntimeError``, so a ported ``pytest.raises(RuntimeError)`` (or ``except RuntimeError``) holds.

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


class StrategyTypeError(StrategyError, TypeError):
    """A ``shard()`` strategy of the wrong *type* (not a tuple of tuples, a split that is not an int): MindSpore's
    ``Primitive.shard`` raises ``TypeError`` there, so this is both a :class:`StrategyError` (its fields, its
    message) and a ``TypeError`` (a ported ``pytest.raises(TypeError)`` holds)."""


class LayoutError(GraphparError, ValueError):
    """A ``Layout`` (``graphpar.parallel.Layout``) built or called with a value MindSpore refuses too: an unknown or
    repeated alias, a device matrix and alias names of different lengths. Fields: ``device_matrix``,
    ``alias_name``, ``reason``; ``hint`` says what would be valid."""

    def __init__(self, device_matrix: Any, alias_name: Any, reason: str, hint: str | None = None):
        self.device_matrix, self.alias_name, self.reason, self.hint = device_matrix, alias_name, reason, hint
        message = f"Layout({device_matrix!r}, {alias_name!r}): {reason}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


class CellError(GraphparError, TypeError):
    """A Cell that is defined or used in a way graphpar cannot run (no construct, duplicate names, ...)."""


class DatasetError(GraphparError, ValueError):
    """A dataset, file or batch that cannot be read or split as asked."""


class DeviceError(GraphparError, ValueError):
    """A device target or device count this machine cannot provide."""


class MeshConflictError(DeviceError, RuntimeError):
    """Strategies whose device matrices cannot share one device mesh (groupings that do not nest, e.g. 3 x 8 and
    8 x 3 on 24 devices). Also a ``RuntimeError``: MindSpore fails such a network when it compiles it, as it does a
    strategy that cannot hold (:class:`StrategyError`), so a ported ``pytest.raises(RuntimeError)`` holds."""


class CommunicationGroupError(DeviceError, RuntimeError):
    """A plan needing a communication group that MindSpore cannot create on Ascend 910 servers (HCCL groups of 8
    devices per server: the same local ranks on every server, and 1, 2, 4 or 8 of them in the shapes HCCL links),
    with ``set_context(device_target="Ascend")``. A ``RuntimeError``, as MindSpore's compile failure. Fields:
    ``op`` (instance name), ``scope``, ``purpose`` (what the group is for) and ``ranks``."""

    def __init__(self, op: str, scope: str, purpose: str, ranks: tuple[int, ...], hint: str):
        self.op, self.scope, self.purpose, self.ranks, self.hint = op, scope, purpose, ranks, hint
        super().__init__(f"op '{op}' in scope {scope}: its {purpose} needs the communication group of ranks "
                         f"{list(ranks)}, which MindSpore cannot create on Ascend 910 (device_target='Ascend'): {hint}")


class RuntimeCheckError(GraphparError, ValueError):
    """A value known only when a step ran failed an op's check (a class label outside ``[0, classes)``); raised
    lazily, after the step (``ops.runtime_checks``). Fields: ``op`` (instance name), ``kind``, ``scope`` (Cell
    scope), ``reason``; ``hint`` says what would be valid."""

    def __init__(self, op: str, kind: str, scope: str, reason: str, hint: str):
        self.op, self.kind, self.scope, self.reason, self.hint = op, kind, scope, reason, hint
        where = f"op '{op}' ({kind})" + (f" in scope {scope}" if scope else "")
        super().__init__(f"{where}: {reason}. {hint}")


class EnvVarError(GraphparError, ValueError):
    """An environment variable whose value cannot be used (``variable``, ``value``), where it applies."""

    def __init__(self, variable: str, value: str, reason: str):
        self.variable, self.value = variable, value
        super().__init__(f"environment variable {variable}={value!r}: {reason}")


class DeletedArrayError(GraphparError, RuntimeError):
    """A value a train step would read is a deleted array (donated to another jitted function, or ``.delete()``d):
    ``what`` names it (a Parameter, other network state, the optimizer state, an input of the batch). XLA's CPU
    client crashes the process on a donated-away buffer, so it is refused before the call."""

    def __init__(self, what: str, remedy: str = "give it a live value first (Parameter.set_data(...), a fresh batch)"):
        self.what = what
        super().__init__(f"the train step's {what} is a deleted array (donated to another jitted function or "
                         f"deleted); {remedy}")


class ParallelModeError(GraphparError, RuntimeError):
    """A setting or Cell used in a parallel mode where MindSpore refuses it when the graph is compiled
    (``full_batch`` outside SEMI_AUTO_PARALLEL / AUTO_PARALLEL, ``DistributedGradReducer`` in a GRAPH_MODE
    SEMI_AUTO / AUTO network): a ``RuntimeError``, as MindSpore raises. ``what`` names the culprit, ``mode`` the
    parallel mode; the message says which modes accept it."""

    def __init__(self, what: str, mode: str, reason: str):
        self.what, self.mode = what, mode
        super().__init__(f"{what} in parallel_mode={mode!r}: {reason}")


class UnsupportedOpError(GraphparError, NotImplementedError):
    """A MindSpore primitive graphpar refuses by name because what it stands for does not exist on a JAX mesh
    (``GetNext``: a device data queue): ``op`` names it, the message says what to write instead."""

    def __init__(self, op: str, reason: str):
        self.op = op
        super().__init__(f"{op}: {reason}")


class DynamicShapeError(GraphparError, NotImplementedError):
    """A dynamic dimension (``None`` or ``-1``, MindSpore's placeholder for a dynamic-shape compile) where graphpar
    needs a size: an initializer (``Tensor(shape=[None, 64], init=...)`` draws values), a placeholder asked for its
    data, or a ``construct`` that uses a dynamic size as a Python int (JAX's shape polymorphism cannot trace it).
    ``shape`` names the shape, the message says what to give instead."""

    def __init__(self, shape: object, reason: str):
        self.shape, self.reason = shape, reason
        super().__init__(f"shape {shape}: {reason}")


class InputSignatureError(GraphparError, ValueError):
    """A call or compile whose inputs do not match the signature ``Cell.set_inputs`` gave (a static dimension of
    another size, another rank or dtype, another number of inputs; MindSpore raises ``ValueError``). ``cell``
    names the network."""

    def __init__(self, cell: str, reason: str):
        self.cell = cell
        super().__init__(f"{cell}: {reason}")


class DynamicStrategyError(StrategyError):
    """A strategy that splits a dynamic dimension an op cannot split (MindSpore's ``CheckStrategyForDynamicShape``,
    per op: Gather's table on its gathered axis, ...): a :class:`StrategyError`, so also the ``RuntimeError``
    MindSpore's compile raises."""


class RuntimeApiError(GraphparError, NotImplementedError):
    """A ``mindspore.runtime`` API with no counterpart on XLA (streams and events: XLA orders a program's work on
    its streams itself): ``api`` names it, the message says what to write instead."""

    def __init__(self, api: str, reason: str):
        self.api = api
        super().__init__(f"mindspore.runtime.{api}: {reason}")


class JitError(GraphparError, TypeError):
    """A function ``graphpar.jit`` (or ``AutoParallel``) cannot compile as written, or a ``jit`` argument graphpar does
    not build: ``function`` names it; the message says what it does and what would compile."""

    def __init__(self, function: str, reason: str):
        self.function = function
        super().__init__(f"graphpar.jit({function}): {reason}")


class TracedControlFlowError(GraphparError, TypeError):
    """Python control flow on a traced value that graphpar does not compile (a ``while`` loop, an ``if`` whose branch
    returns or raises, branches whose values do not merge): ``where`` is the user's ``file:line (`statement`)``,
    ``reason`` what is refused and what would compile."""

    def __init__(self, where: str, reason: str):
        self.where, self.reason = where, reason
        super().__init__(f"{where}: {reason}")


_INTERNAL_MODULES = ("graphpar", "jax", "jaxlib", "contextlib")


def _internal(frame: types.FrameType) -> bool:
    """A frame of graphpar, JAX or contextlib (by the module its code belongs to)."""
    module = str(frame.f_globals.get("__name__", ""))
    return module.split(".", 1)[0] in _INTERNAL_MODULES


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` without the frames of graphpar, JAX and contextlib (a new chain of the user's frames, in order)."""
    kept = []
    while tb is not None:
        if not _internal(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for entry in reversed(kept):
        out = types.TracebackType(out, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return out


def _trim_chain(err: BaseException) -> None:
    """Trim ``err``'s traceback and those of the exceptions chained to it (each once)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        exc.with_traceback(user_traceback(exc.__traceback__))
        todo.extend((exc.__cause__, exc.__context__))


def api_boundary(fn: F) -> F:
    """``fn`` raising a :class:`GraphparError` with only the user's frames in its traceback (see the module)."""
    @functools.wraps(fn)
    def boundary(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GraphparError as err:
            _trim_chain(err)
            raise err  # its chain as it was; this frame is the one graphpar frame left above the user's
    return boundary  # type: ignore[return-value]
