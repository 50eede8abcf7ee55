"""The error every checkpoint problem raises: it names the file and says what would be valid."""

from __future__ import annotations

from graphpar.errors import GraphparError


class CheckpointError(GraphparError, ValueError):
    """A checkpoint that cannot be written, found, verified or loaded as asked.

    Fields: ``path`` (the checkpoint or the file inside it that is at fault), ``reason`` and ``fix`` (what to do
    instead). A ``ValueError``, as MindSpore's ``load_checkpoint`` raises for a bad file.
    """

    def __init__(self, path: str, reason: str, fix: str | None = None):
        self.path, self.reason, self.fix = str(path), reason, fix
        message = f"checkpoint {self.path}: {reason}"
        if fix:
            message += f". {fix}"
        super().__init__(message)
