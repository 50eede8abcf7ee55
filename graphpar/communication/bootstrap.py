"""Joining a multi-process job (filled in by the distributed-runtime work; one process needs nothing)."""

from __future__ import annotations

from graphpar.communication.management import GlobalComm


def initialize(backend_name: str | None = None) -> None:
    GlobalComm.INITED = True
