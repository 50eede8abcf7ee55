"""MindSpore 2.6's ``mindspore.runtime`` stream and event API.

``synchronize()`` has its meaning on XLA: wait until every dispatched computation has finished (every live array is
ready and every ordered effect, such as a host callback, has run). Streams and events do not: XLA assigns a
compiled program's work to the device's streams itself (compute and collectives overlap by its scheduler), so there
is no stream to create, select or wait on from Python; those names are refused, each saying what to use instead.
"""

from __future__ import annotations

import jax

from graphpar.errors import RuntimeApiError

_STREAMS = ("XLA assigns a compiled program's work to the device's streams itself (collectives overlap compute by "
            "its scheduler); there are no user streams. Put the work in one step (one compiled program) and call "
            "graphpar.runtime.synchronize() to wait for it")


def synchronize() -> None:
    """Wait for all work dispatched so far: every live array is computed and every ordered effect has run."""
    for array in jax.live_arrays():
        if not array.is_deleted():
            array.block_until_ready()
    jax.effects_barrier()


class Stream:
    """Refused: see the module's note."""

    def __init__(self, *args, **kwargs):
        raise RuntimeApiError("Stream", _STREAMS)


class Event:
    """Refused: events order work between user streams, which XLA does not have."""

    def __init__(self, *args, **kwargs):
        raise RuntimeApiError("Event", "events order work between user streams, and " + _STREAMS)


class StreamCtx:
    """Refused: see the module's note."""

    def __init__(self, *args, **kwargs):
        raise RuntimeApiError("StreamCtx", _STREAMS)


def current_stream():
    raise RuntimeApiError("current_stream", _STREAMS)


def default_stream():
    raise RuntimeApiError("default_stream", _STREAMS)


def communication_stream():
    raise RuntimeApiError("communication_stream", _STREAMS)


def set_cur_stream(stream):
    raise RuntimeApiError("set_cur_stream", _STREAMS)
