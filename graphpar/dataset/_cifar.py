"""CIFAR-10 and CIFAR-100 readers, for both published formats.

Binary (``cifar-10-batches-bin``: ``data_batch_N.bin``, ``test_batch.bin``; ``cifar-100-binary``: ``train.bin``,
``test.bin``): fixed-size records of label byte(s) then 3072 bytes of planar R, G, B rows. Files are memory-mapped
lazily in each process, so a reader pickles to worker processes as a few paths.

Python (``cifar-10-batches-py``, ``cifar-100-python``): pickled dicts holding ``b"data"`` (N x 3072 uint8) and the
labels. They are unpickled with a whitelist that admits only numpy arrays, so a tampered file cannot run code.

Both give ``image`` as HWC uint8 (32, 32, 3) and labels as uint32, as MindSpore's readers do. Every file is checked
when the dataset is created: sizes, record boundaries and label ranges, with errors naming file and byte offset.
"""

from __future__ import annotations

import codecs
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphpar.dataset._files import check_no_cache, check_usage, natural_key, record_count, require_dir
from graphpar.dataset._rows import Row
from graphpar.dataset._source import SourceDataset
from graphpar.errors import DatasetError

_PIXELS = 3072


@dataclass(frozen=True)
class _Layout:
    """One CIFAR variant: folder names, file names per usage, label fields (in file order) and their ranges."""

    who: str
    bin_dir: str
    py_dir: str
    bin_files: dict[str, str]  # usage -> file-name regex
    py_files: dict[str, str]
    labels: tuple[tuple[str, bytes, int], ...]  # (column, python key, number of classes), in binary record order
    columns: tuple[str, ...]  # MindSpore's column order

    @property
    def record(self) -> int:
        return len(self.labels) + _PIXELS


CIFAR10 = _Layout("Cifar10Dataset", "cifar-10-batches-bin", "cifar-10-batches-py",
                  {"train": r"data_batch_\d+\.bin", "test": r"test_batch\.bin"},
                  {"train": r"data_batch_\d+", "test": r"test_batch"},
                  (("label", b"labels", 10),), ("image", "label"))
CIFAR100 = _Layout("Cifar100Dataset", "cifar-100-binary", "cifar-100-python",
                   {"train": r"train\.bin", "test": r"test\.bin"}, {"train": r"train", "test": r"test"},
                   (("coarse_label", b"coarse_labels", 20), ("fine_label", b"fine_labels", 100)),
                   ("image", "fine_label", "coarse_label"))


def _files(folder: Path, patterns: dict[str, str], usage: str) -> list[Path]:
    """Files of ``usage`` in ``folder``: train files (in natural order) before test files, as MindSpore."""
    found: list[Path] = []
    for part in (["train", "test"] if usage == "all" else [usage]):
        pattern = re.compile(patterns[part])
        found += sorted((p for p in folder.iterdir() if p.is_file() and pattern.fullmatch(p.name)), key=natural_key)
    return found


def _locate(dataset_dir: str | os.PathLike, layout: _Layout, usage: str) -> tuple[str, list[Path]]:
    """("bin" | "py", files) for ``usage``, looking in ``dataset_dir`` and in its CIFAR-named subfolders."""
    root = require_dir(dataset_dir, layout.who)
    for folder in (root, root / layout.bin_dir, root / layout.py_dir):
        if not folder.is_dir():
            continue
        for kind, patterns in (("bin", layout.bin_files), ("py", layout.py_files)):
            files = _files(folder, patterns, usage)
            if files:
                return kind, files
    raise DatasetError(f"{layout.who}: no CIFAR files for usage={usage!r} in {str(root)!r} (nor in its "
                       f"{layout.bin_dir!r} / {layout.py_dir!r} subfolders); expected binary files matching "
                       f"{sorted(layout.bin_files.values())} or python files matching "
                       f"{sorted(layout.py_files.values())}")


def _check_labels(path: Path, labels: np.ndarray, layout: _Layout, field: int, offset_of: Any) -> None:
    column, _, classes = layout.labels[field]
    bad = np.flatnonzero(labels >= classes)
    if bad.size:
        i = int(bad[0])
        raise DatasetError(f"{path}: {offset_of(i)} holds {column} {int(labels[i])}, but {layout.who} labels are "
                           f"0..{classes - 1}; the file is corrupt")


class _BinReader:
    """Records of several binary files; memory maps open lazily (per process)."""

    def __init__(self, files: list[Path], layout: _Layout):
        self.files, self.layout = [str(f) for f in files], layout
        counts = []
        for f in files:
            n = record_count(f, layout.record, 0, f"{layout.who} binary")
            records = np.memmap(f, dtype=np.uint8, mode="r", shape=(n, layout.record))
            for k in range(len(layout.labels)):
                _check_labels(f, np.asarray(records[:, k]), layout, k,
                              lambda i, k=k: f"byte offset {i * layout.record + k} (record {i})")
            counts.append(n)
        self.ends = np.cumsum(counts)
        self._maps: list[np.memmap] | None = None

    def __len__(self) -> int:
        return int(self.ends[-1])

    def __getitem__(self, i: int) -> Row:
        if self._maps is None:
            r = self.layout.record
            self._maps = [np.memmap(f, dtype=np.uint8, mode="r").reshape(-1, r) for f in self.files]
        f = int(np.searchsorted(self.ends, i, side="right"))
        record = self._maps[f][i - (int(self.ends[f - 1]) if f else 0)]
        n = len(self.layout.labels)
        image = np.ascontiguousarray(record[n:].reshape(3, 32, 32).transpose(1, 2, 0))
        labels = {c: np.asarray(record[k], dtype=np.uint32) for k, (c, _, _) in enumerate(self.layout.labels)}
        return (image,) + tuple(labels[c] for c in self.layout.columns[1:])

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_maps": None}


_RECONSTRUCT = np.zeros(1).__reduce__()[0]
_SCALAR = np.float64(0).__reduce__()[0]
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT, ("numpy._core.multiarray", "_reconstruct"):
            _RECONSTRUCT, ("numpy.core.multiarray", "scalar"): _SCALAR, ("numpy._core.multiarray", "scalar"): _SCALAR,
            ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): codecs.encode}


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a CIFAR batch holds only numpy arrays "
                                         "and lists") from None


def _load_py(path: Path, layout: _Layout) -> tuple[np.ndarray, list[np.ndarray]]:
    try:
        with open(path, "rb") as f:
            batch = _ArraysOnly(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise DatasetError(f"{path}: not a readable CIFAR python batch ({type(exc).__name__}: {exc}); the file is "
                           "truncated or corrupt") from exc
    if not isinstance(batch, dict) or b"data" not in batch:
        raise DatasetError(f"{path}: expected a pickled dict with b'data' and label keys, got "
                           f"{type(batch).__name__}")
    data = np.asarray(batch[b"data"])
    if data.ndim != 2 or data.shape[1] != _PIXELS or data.dtype != np.uint8:
        raise DatasetError(f"{path}: b'data' must be an N x {_PIXELS} uint8 array, got {data.dtype} {data.shape}")
    labels = []
    for k, (column, key, _) in enumerate(layout.labels):
        if key not in batch:
            raise DatasetError(f"{path}: missing {key!r} (the {column} column)")
        values = np.asarray(batch[key])
        if values.shape != (len(data),):
            raise DatasetError(f"{path}: {key!r} has {values.size} labels for {len(data)} images")
        if values.size and values.min() < 0:
            raise DatasetError(f"{path}: {key!r} holds a negative label; the file is corrupt")
        _check_labels(path, values, layout, k, lambda i, key=key: f"{key!r}[{i}]")
        labels.append(values.astype(np.uint32))
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)), labels


class _PyReader:
    """Rows of python-format batches, unpickled once per process."""

    def __init__(self, files: list[Path], layout: _Layout):
        self.files, self.layout = [str(f) for f in files], layout
        self._data: tuple[np.ndarray, list[np.ndarray]] | None = self._load()

    def _load(self) -> tuple[np.ndarray, list[np.ndarray]]:
        parts = [_load_py(Path(f), self.layout) for f in self.files]
        images = np.concatenate([p[0] for p in parts])
        labels = [np.concatenate([p[1][k] for p in parts]) for k in range(len(self.layout.labels))]
        return images, labels

    def __len__(self) -> int:
        return len(self._loaded()[0])

    def _loaded(self) -> tuple[np.ndarray, list[np.ndarray]]:
        if self._data is None:
            self._data = self._load()
        return self._data

    def __getitem__(self, i: int) -> Row:
        images, labels = self._loaded()
        by_column = {c: np.asarray(labels[k][i]) for k, (c, _, _) in enumerate(self.layout.labels)}
        return (images[i].copy(),) + tuple(by_column[c] for c in self.layout.columns[1:])

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_data": None}


def _reader(dataset_dir: str | os.PathLike, layout: _Layout, usage: str) -> Any:
    kind, files = _locate(dataset_dir, layout, usage)
    return _BinReader(files, layout) if kind == "bin" else _PyReader(files, layout)


class Cifar10Dataset(SourceDataset):
    """CIFAR-10 from ``dataset_dir`` (the batches folder or its parent): columns ``image`` (32x32x3 uint8, HWC) and
    ``label`` (uint32). ``usage``: "train" (data_batch_*), "test" (test_batch) or "all"/None (both, MindSpore's
    default)."""

    def __init__(self, dataset_dir: str | os.PathLike, usage: str | None = None, num_samples: int | None = None,
                 num_parallel_workers: int | None = None, shuffle: bool | None = None, sampler: Any = None,
                 num_shards: int | None = None, shard_id: int | None = None, cache: Any = None):
        check_no_cache(cache, "Cifar10Dataset")
        self.usage = check_usage(usage, ("train", "test", "all"), "Cifar10Dataset")
        super().__init__(_reader(dataset_dir, CIFAR10, self.usage), CIFAR10.columns, num_samples=num_samples,
                         num_parallel_workers=num_parallel_workers, shuffle=shuffle, sampler=sampler,
                         num_shards=num_shards, shard_id=shard_id, num_classes=10)


class Cifar100Dataset(SourceDataset):
    """CIFAR-100: columns ``image`` (32x32x3 uint8), ``fine_label`` (0..99) and ``coarse_label`` (0..19), uint32."""

    def __init__(self, dataset_dir: str | os.PathLike, usage: str | None = None, num_samples: int | None = None,
                 num_parallel_workers: int | None = None, shuffle: bool | None = None, sampler: Any = None,
                 num_shards: int | None = None, shard_id: int | None = None, cache: Any = None):
        check_no_cache(cache, "Cifar100Dataset")
        self.usage = check_usage(usage, ("train", "test", "all"), "Cifar100Dataset")
        super().__init__(_reader(dataset_dir, CIFAR100, self.usage), CIFAR100.columns, num_samples=num_samples,
                         num_parallel_workers=num_parallel_workers, shuffle=shuffle, sampler=sampler,
                         num_shards=num_shards, shard_id=shard_id, num_classes=100)
