"""Shared checks for the file readers: directories that must exist, files that must be whole."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from graphpar.errors import DatasetError


def require_dir(dataset_dir: str | os.PathLike, who: str) -> Path:
    if not isinstance(dataset_dir, (str, os.PathLike)):
        raise DatasetError(f"{who}: dataset_dir must be a path, got {dataset_dir!r}")
    path = Path(dataset_dir).expanduser()
    if not path.exists():
        raise DatasetError(f"{who}: dataset_dir {str(path)!r} does not exist (graphpar never downloads datasets; "
                           "see examples/make_cifar_like.py for a generated one)")
    if not path.is_dir():
        raise DatasetError(f"{who}: dataset_dir {str(path)!r} is a file, not a directory")
    return path


def check_usage(usage: str | None, valid: Sequence[str], who: str) -> str:
    usage = "all" if usage is None else usage
    if usage not in valid:
        raise DatasetError(f"{who}: usage must be one of {list(valid)} (or None for 'all'), got {usage!r}")
    return usage


def check_no_cache(cache: object, who: str) -> None:
    if cache is not None:
        raise DatasetError(f"{who}: cache (a MindSpore cache server) is not supported by graphpar; pass cache=None")


def natural_key(path: Path) -> tuple:
    """Sort key that puts data_batch_2 before data_batch_10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name))


def record_count(path: Path, record: int, header: int, what: str) -> int:
    """Whole records in ``path`` after a ``header``-byte header; a partial record is an error naming its offset."""
    size = path.stat().st_size
    body = size - header
    if body <= 0:
        raise DatasetError(f"{path}: {size} bytes holds no {what} record (header {header} bytes, records "
                           f"{record} bytes); the file is empty or truncated")
    whole, rest = divmod(body, record)
    if rest:
        offset = header + whole * record
        raise DatasetError(f"{path}: size {size} bytes is not a whole number of {record}-byte {what} records "
                           f"after the {header}-byte header; the record at byte offset {offset} is incomplete "
                           f"({rest} of {record} bytes): the file is truncated or not in {what} format")
    return whole
