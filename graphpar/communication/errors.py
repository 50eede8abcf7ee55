"""Errors of the communication layer: joining a job, groups, and collective ops used where they cannot run."""

from __future__ import annotations

from graphpar.errors import GraphparError


class CommunicationError(GraphparError, RuntimeError):
    """A communication call that cannot be served as asked (wrong backend, unknown group, op outside a per-rank
    run). The message names the culprit and what would be valid."""


class ClusterError(GraphparError, RuntimeError):
    """Joining a multi-process job failed: a bad or inconsistent launch environment, a peer that never came, a
    worker refused by the scheduler, a timeout. ``variable`` names the environment variable at fault, if one is."""

    def __init__(self, message: str, variable: str | None = None):
        self.variable = variable
        super().__init__(message)


class UnsafePathError(ClusterError):
    """A local rendezvous place (coordinator address file, the TLS tunnel's socket directory) that another user
    could read or plant: owned by someone else, a symbolic link, or with group/other permissions. ``path`` names it."""

    def __init__(self, path: str, reason: str):
        self.path = path
        super().__init__(f"{path} {reason}")
