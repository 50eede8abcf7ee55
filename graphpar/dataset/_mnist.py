"""MNIST reader: the idx files (``train-images-idx3-ubyte`` and friends, plain or ``.gz``).

An idx file is a big-endian header (magic number, then one uint32 per dimension) followed by the raw uint8 array.
Headers, sizes and labels are checked when the dataset is created; errors name the file and the byte offset. Plain
files are memory-mapped lazily per process; ``.gz`` files are decompressed once per process.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from graphpar.dataset._files import check_no_cache, check_usage, require_dir
from graphpar.dataset._rows import Row
from graphpar.dataset._source import SourceDataset
from graphpar.errors import DatasetError

_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049
_PREFIX = {"train": "train", "test": "t10k"}


def _lookup(root: Path, prefix: str, kind: str) -> Path | None:
    """``{prefix}-{kind}`` with MNIST's spellings (``-`` or ``.`` before idx, optional ``.gz``), None if absent."""
    stem, idx = kind.split("-", 1)
    for name in (f"{prefix}-{stem}-{idx}", f"{prefix}-{stem}.{idx}"):
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _find(root: Path, prefix: str, kind: str) -> Path:
    found = _lookup(root, prefix, kind)
    if found is not None:
        return found
    raise DatasetError(f"MnistDataset: {str(root / f'{prefix}-{kind}')!r} (or .gz) not found; expected the idx "
                       "files train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                       "t10k-labels-idx1-ubyte")


def _read_bytes(path: Path) -> bytes | np.memmap:
    if path.suffix != ".gz":
        if os.path.getsize(path) == 0:
            return b""  # numpy cannot map an empty file; the header check names it
        return np.memmap(path, dtype=np.uint8, mode="r")
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: cannot decompress ({type(exc).__name__}: {exc}); the file is truncated or "
                           "not gzip") from exc


class _Idx:
    """One idx file: its header, checked, and the array it holds."""

    def __init__(self, path: Path, magic: int, dims: int, what: str):
        self.path = path
        data = _read_bytes(path)
        header = 4 * (1 + dims)
        if len(data) < header:
            raise DatasetError(f"{path}: {len(data)} bytes is shorter than the {header}-byte idx header; the file "
                               "is truncated")
        values = np.frombuffer(bytes(data[:header]), dtype=">u4")
        if int(values[0]) != magic:
            raise DatasetError(f"{path}: magic number {int(values[0])} at byte offset 0, expected {magic} "
                               f"({what}); this is not an MNIST {what} file")
        self.shape = tuple(int(v) for v in values[1:])
        item = int(np.prod(self.shape[1:], dtype=np.int64))
        expected = header + self.shape[0] * item
        if len(data) < expected:
            whole = (len(data) - header) // max(item, 1)
            raise DatasetError(f"{path}: {len(data)} bytes but the header announces {self.shape[0]} items "
                               f"({expected} bytes); item {whole} at byte offset {header + whole * item} is "
                               "incomplete: the file is truncated")
        if len(data) > expected:
            raise DatasetError(f"{path}: {len(data) - expected} unexpected bytes after the last item (byte offset "
                               f"{expected}); the file is corrupt or its header is wrong")
        self.header, self.data = header, data

    def array(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.uint8, offset=self.header).reshape(self.shape) \
            if isinstance(self.data, bytes) else np.asarray(self.data[self.header:]).reshape(self.shape)


class _MnistReader:
    """Images (28x28x1 uint8) and labels (uint32) of the files of one or both splits."""

    def __init__(self, pairs: list[tuple[Path, Path]]):
        self.pairs = pairs
        counts, arrays = [], []
        for images_path, labels_path in pairs:
            images = _Idx(images_path, _IMAGES_MAGIC, 3, "images (idx3-ubyte)")
            labels = _Idx(labels_path, _LABELS_MAGIC, 1, "labels (idx1-ubyte)")
            if images.shape[0] != labels.shape[0]:
                raise DatasetError(f"MnistDataset: {images_path} holds {images.shape[0]} images but {labels_path} "
                                   f"holds {labels.shape[0]} labels")
            values = labels.array()
            bad = np.flatnonzero(values > 9)
            if bad.size:
                i = int(bad[0])
                raise DatasetError(f"{labels_path}: byte offset {labels.header + i} (label {i}) holds {int(values[i])}"
                                   ", but MNIST labels are 0..9; the file is corrupt")
            counts.append(images.shape[0])
            arrays.append((images.array(), values))
        self.ends = np.cumsum(counts)
        self._arrays: list[tuple[np.ndarray, np.ndarray]] | None = arrays

    def _loaded(self) -> list[tuple[np.ndarray, np.ndarray]]:
        if self._arrays is None:
            self._arrays = [(_Idx(i, _IMAGES_MAGIC, 3, "images").array(), _Idx(lb, _LABELS_MAGIC, 1, "labels").array())
                            for i, lb in self.pairs]
        return self._arrays

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, i: int) -> Row:
        f = int(np.searchsorted(self.ends, i, side="right"))
        images, labels = self._loaded()[f]
        j = i - (int(self.ends[f - 1]) if f else 0)
        return np.array(images[j])[:, :, None], np.asarray(labels[j], dtype=np.uint32)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrays": None}


def _present_splits(root: Path) -> list[str]:
    """The splits whose idx files ``root`` holds, train first: what ``usage="all"`` (MindSpore's default) reads.
    MindSpore reads whichever image/label files the directory holds (the samples' ``MNIST_Data/train/`` holds the
    train pair only); a split with one file of its pair, or a directory with none, is refused by name."""
    splits = []
    for split, prefix in _PREFIX.items():
        images = _lookup(root, prefix, "images-idx3-ubyte")
        labels = _lookup(root, prefix, "labels-idx1-ubyte")
        if (images is None) != (labels is None):
            missing = f"{prefix}-labels-idx1-ubyte" if labels is None else f"{prefix}-images-idx3-ubyte"
            raise DatasetError(f"MnistDataset: {str(root)!r} holds {(images or labels).name} but not {missing} "
                               f"(or .gz); the {split} images and labels come in pairs")
        if images is not None:
            splits.append(split)
    if not splits:
        raise DatasetError(f"MnistDataset: {str(root)!r} holds no MNIST idx files; expected train-images-idx3-ubyte "
                           "with train-labels-idx1-ubyte, and/or t10k-images-idx3-ubyte with t10k-labels-idx1-ubyte "
                           "(plain or .gz)")
    return splits


class MnistDataset(SourceDataset):
    """MNIST from the idx files in ``dataset_dir``: ``image`` (28x28x1 uint8) and ``label`` (uint32).
    ``usage``: "train", "test", or "all"/None (MindSpore's default): every split whose files the directory holds,
    train before test."""

    def __init__(self, dataset_dir: str | os.PathLike, usage: str | None = None, num_samples: int | None = None,
                 num_parallel_workers: int | None = None, shuffle: bool | None = None, sampler: Any = None,
                 num_shards: int | None = None, shard_id: int | None = None, cache: Any = None):
        check_no_cache(cache, "MnistDataset")
        self.usage = check_usage(usage, ("train", "test", "all"), "MnistDataset")
        root = require_dir(dataset_dir, "MnistDataset")
        parts = _present_splits(root) if self.usage == "all" else [self.usage]
        pairs = [(_find(root, _PREFIX[p], "images-idx3-ubyte"), _find(root, _PREFIX[p], "labels-idx1-ubyte"))
                 for p in parts]
        super().__init__(_MnistReader(pairs), ["image", "label"], num_samples=num_samples,
                         num_parallel_workers=num_parallel_workers, shuffle=shuffle, sampler=sampler,
                         num_shards=num_shards, shard_id=shard_id, num_classes=10)
