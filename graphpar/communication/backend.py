"""Which JAX platform a MindSpore backend name means, checked against the context before anything starts.

MindSpore names its collective libraries after the hardware: ``nccl`` (NVIDIA GPUs), ``hccl`` (Ascend), ``mccl``
(its own CPU library). On XLA the platform decides the library (NCCL on GPUs, gloo between CPU processes), so a
backend name is only a statement about the platform: ``init("nccl")`` on a CPU job is a mistake worth naming
before the job starts, not a silent fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphpar.communication.errors import CommunicationError

HCCL_WORLD_COMM_GROUP = "hccl_world_group"
NCCL_WORLD_COMM_GROUP = "nccl_world_group"
MCCL_WORLD_COMM_GROUP = "mccl_world_group"
WORLD_GROUP_NAMES = (HCCL_WORLD_COMM_GROUP, NCCL_WORLD_COMM_GROUP, MCCL_WORLD_COMM_GROUP)

# backend name -> the set_context(device_target=...) it belongs to
_TARGET_OF = {"nccl": "GPU", "hccl": "Ascend", "mccl": "CPU", "gloo": "CPU"}
_DEFAULT_FOR = {"GPU": "nccl", "CPU": "mccl", "TPU": "xla"}
_WORLD_OF = {"nccl": NCCL_WORLD_COMM_GROUP, "mccl": MCCL_WORLD_COMM_GROUP, "gloo": MCCL_WORLD_COMM_GROUP,
             "xla": NCCL_WORLD_COMM_GROUP}


@dataclass(frozen=True)
class Backend:
    """``name`` as ``GlobalComm.BACKEND`` reports it, the JAX ``platform`` it runs on, the world group's name."""

    name: str
    platform: str
    world_group: str


def resolve(backend_name: str | None, device_target: str) -> Backend:
    """The backend for ``init(backend_name)`` under ``set_context(device_target=device_target)``.

    ``None`` picks the target's own library (MindSpore's rule: ``init()`` follows ``device_target``). A name for
    another platform raises :class:`CommunicationError` naming both and the valid choices.
    """
    if backend_name is not None and not isinstance(backend_name, str):
        raise CommunicationError(f"init(backend_name={backend_name!r}): expected a string such as 'nccl', 'gloo' or "
                                 "None")
    name = backend_name.lower() if backend_name else None
    if name == "hccl":
        raise CommunicationError(
            "init('hccl'): HCCL is Huawei Ascend's collective library and graphpar runs on XLA, which has no Ascend "
            "backend. On GPUs use init('nccl'); on CPUs init('gloo') or init('mccl'); or init() to follow "
            "set_context(device_target=...)")
    if name is not None and name not in _TARGET_OF:
        raise CommunicationError(f"init({backend_name!r}): unknown backend; valid: 'nccl' (GPU), 'gloo' or 'mccl' "
                                 "(CPU), 'hccl' (Ascend, not available on XLA), or None (follow device_target)")
    if name is None:
        name = _DEFAULT_FOR[device_target]
    elif _TARGET_OF[name] != device_target:
        valid = [n for n, t in _TARGET_OF.items() if t == device_target] or [_DEFAULT_FOR[device_target]]
        raise CommunicationError(
            f"init({backend_name!r}) asks for {_TARGET_OF[name]} collectives, but this job runs on "
            f"set_context(device_target={device_target!r}). Either call set_context(device_target="
            f"{_TARGET_OF[name]!r}) before init(), or use init() / init({valid[0]!r}) for {device_target}")
    return Backend(name=name, platform=device_target.lower(), world_group=_WORLD_OF[name])
