"""The Dynamic Cluster protocol's messages as typed values, each checked field by field when it arrives.

A message is one JSON object with an ``op``; :func:`parse` turns it into the frozen dataclass of that op, or raises
:class:`ProtocolError` naming the field, what it held and what would be valid (``field 'pid' must be an integer
>= 0, got 'x'``). The scheduler sends that sentence back as a refusal and keeps serving; a worker turns one into a
ClusterError. Fields beyond an op's own are refused too, so a typo or another program's protocol is named, not
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


class ProtocolError(ValueError):
    """A message that is not one the protocol allows here; the text says which field is wrong and how."""


# --- worker -> scheduler ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Register:
    """A worker asking for its place: its MS_NODE_ID (None: any free index), MS_WORKER_NUM, pid and host name."""

    worker_num: int
    pid: int
    node_id: str | None = None
    hostname: str = "?"
    local_devices: int | None = None


@dataclass(frozen=True)
class CoordinatorReport:
    """Process 0 telling the scheduler where its JAX coordinator listens."""

    address: str


@dataclass(frozen=True)
class Exit:
    """A worker leaving; ``failed`` when after an uncaught exception."""

    failed: bool


# --- scheduler -> worker ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Assign:
    """A worker's place in the job; process 0 gets ``advertise_host`` (where to open the coordinator), the others
    ``coordinator``."""

    process_id: int
    num_processes: int
    local_process_id: int
    local_process_count: int
    advertise_host: str | None = None
    coordinator: str | None = None


@dataclass(frozen=True)
class Stop:
    """``refused``, ``failed``, ``abort`` or ``restart``, with the scheduler's reason."""

    op: str
    reason: str


_NAME = 255  # host names and node ids longer than this are not names


def _int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _NAME


def _address(value: Any) -> bool:
    if not isinstance(value, str) or len(value) > _NAME:
        return False
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


# op -> (type, {field: (check, what a valid value is)}, required fields)
_SCHEMA = {
    "register": (Register, {"node_id": (lambda v: v is None or _text(v), "a string of 1-255 characters or null"),
                            "worker_num": (lambda v: _int(v, 1), "an integer >= 1"),
                            "pid": (lambda v: _int(v, 0), "an integer >= 0"),
                            "hostname": (_text, "a string of 1-255 characters"),
                            "local_devices": (lambda v: v is None or _int(v, 1), "an integer >= 1 or null")},
                 ("worker_num", "pid")),
    "coordinator": (CoordinatorReport, {"address": (_address, "HOST:PORT")}, ("address",)),
    "exit": (Exit, {"failed": (lambda v: isinstance(v, bool), "true or false")}, ("failed",)),
    "assign": (Assign, {"process_id": (lambda v: _int(v, 0), "an integer >= 0"),
                        "num_processes": (lambda v: _int(v, 1), "an integer >= 1"),
                        "local_process_id": (lambda v: _int(v, 0), "an integer >= 0"),
                        "local_process_count": (lambda v: _int(v, 1), "an integer >= 1"),
                        "advertise_host": (lambda v: v is None or _text(v), "a host name or address"),
                        "coordinator": (lambda v: v is None or _address(v), "HOST:PORT")},
               ("process_id", "num_processes", "local_process_id", "local_process_count")),
}
for _op in ("refused", "failed", "abort", "restart"):
    _SCHEMA[_op] = (Stop, {"reason": (lambda v: isinstance(v, str), "a string")}, ("reason",))

WORKER_OPS = ("register", "coordinator", "exit")
SCHEDULER_OPS = ("assign", "refused", "failed", "abort", "restart")


def parse(message: dict[str, Any], allowed: tuple[str, ...]) -> Any:
    """``message`` as the typed value of its op, if the op is one of ``allowed`` and every field checks out."""
    op = message.get("op")
    if op not in allowed:
        raise ProtocolError(f"op {op!r} is not expected here; valid: {', '.join(allowed)}")
    kind, checks, required = _SCHEMA[op]
    unknown = sorted(set(message) - set(checks) - {"op"})
    if unknown:
        raise ProtocolError(f"{op}: unknown field(s) {unknown}; valid: {', '.join(checks)}")
    missing = [name for name in required if name not in message]
    if missing:
        raise ProtocolError(f"{op}: field(s) {missing} missing")
    for name, (check, valid) in checks.items():
        if name in message and not check(message[name]):
            raise ProtocolError(f"{op}: field {name!r} must be {valid}, got {message[name]!r:.80}")
    values = {f.name: message[f.name] for f in fields(kind) if f.name in message}
    return Stop(op, message["reason"]) if kind is Stop else kind(**values)
