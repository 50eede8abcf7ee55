"""``TFDSDataset``: a tensorflow-datasets dataset that is already prepared on disk, read without TensorFlow.

``tfds.data_source(name, split=..., data_dir=..., download=False)`` gives random access to the prepared
array_record files. graphpar never asks tfds to download or prepare: offline, that hangs for minutes; prepare the
dataset elsewhere (``tfds.builder(name, data_dir=...).download_and_prepare()``) and copy the directory.
tensorflow-datasets is optional: ``pip install tensorflow-datasets array_record``.

Columns are the feature names of the first record, nested dicts flattened as ``outer/inner``.
"""

from __future__ import annotations

import os
from typing import Any

from graphpar.dataset._rows import Row, to_array
from graphpar.dataset._source import SourceDataset
from graphpar.errors import DatasetError

_INSTALL = "pip install tensorflow-datasets array_record"


def _flatten(record: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(record, dict):
        return {prefix or "data": record}
    out: dict[str, Any] = {}
    for key, value in record.items():
        out.update(_flatten(value, f"{prefix}/{key}" if prefix else str(key)))
    return out


def _open(name: str, data_dir: str | None, split: str) -> Any:
    try:
        import tensorflow_datasets as tfds
    except ImportError as exc:
        raise DatasetError(f"TFDSDataset needs the optional package tensorflow-datasets (not installed): "
                           f"{_INSTALL}") from exc
    try:
        return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    except Exception as exc:  # noqa: BLE001 - tfds raises many types for "not prepared here"
        raise DatasetError(f"TFDSDataset: cannot open {name!r} split {split!r} in data_dir={data_dir!r} without "
                           f"downloading ({type(exc).__name__}: {exc}); prepare it elsewhere with "
                           f"tfds.builder({name!r}).download_and_prepare() and copy the directory here") from exc


class _TfdsReader:
    """Rows of a tfds data source; reopened lazily in each worker process."""

    def __init__(self, name: str, data_dir: str | None, split: str):
        self.name, self.data_dir, self.split = name, data_dir, split
        self._source = _open(name, data_dir, split)
        self._length = len(self._source)
        if self._length == 0:
            raise DatasetError(f"TFDSDataset: {name!r} split {split!r} is empty")
        self.columns = list(_flatten(self._source[0]))

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> Row:
        if self._source is None:
            self._source = _open(self.name, self.data_dir, self.split)
        flat = _flatten(self._source[i])
        return tuple(to_array(flat[c], f"TFDSDataset {self.name!r}[{i}] column {c!r}") for c in self.columns)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_source": None}


def _num_classes(reader: _TfdsReader) -> int | None:
    """Classes of the ``label`` feature, when the dataset's metadata says (a ClassLabel feature)."""
    try:
        return int(reader._source.dataset_info.features["label"].num_classes)
    except Exception:  # noqa: BLE001 - metadata is optional
        return None


class TFDSDataset(SourceDataset):
    """Records of a prepared tensorflow-datasets dataset (graphpar extension; see the module docstring)."""

    def __init__(self, name: str, data_dir: str | os.PathLike | None = None, split: str = "train",
                 num_samples: int | None = None, num_parallel_workers: int | None = None,
                 shuffle: bool | None = None, sampler: Any = None, num_shards: int | None = None,
                 shard_id: int | None = None):
        if data_dir is not None and not os.path.isdir(data_dir):
            raise DatasetError(f"TFDSDataset: data_dir {str(data_dir)!r} does not exist (graphpar never downloads)")
        reader = _TfdsReader(name, None if data_dir is None else os.fspath(data_dir), split)
        super().__init__(reader, reader.columns, num_samples=num_samples, num_parallel_workers=num_parallel_workers,
                         shuffle=shuffle, sampler=sampler, num_shards=num_shards, shard_id=shard_id,
                         num_classes=_num_classes(reader))
        self.name, self.split = name, split

