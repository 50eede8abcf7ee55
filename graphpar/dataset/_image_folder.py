"""``ImageFolderDataset``: one sub-folder per class, files inside are that class's images.

Classes are the sub-folder names in sorted order (indices 0, 1, ...) unless ``class_indexing`` maps names to
indices, in which case only those folders are read. Files are listed once, sorted within each class. Images come
as the raw file bytes (1-D uint8, MindSpore's ``decode=False``) for a later ``vision.Decode()``, or decoded to HWC
uint8 RGB with ``decode=True`` (Pillow).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphpar.dataset._files import check_no_cache, require_dir
from graphpar.dataset._rows import Row
from graphpar.dataset._source import SourceDataset
from graphpar.dataset.vision._pixels import decode_image
from graphpar.errors import DatasetError


def _classes(root: Path, class_indexing: dict[str, int] | None) -> dict[str, int]:
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if class_indexing is None:
        if not folders:
            raise DatasetError(f"ImageFolderDataset: {str(root)!r} has no class sub-folders; expected one folder per "
                               "class holding its images")
        return {name: i for i, name in enumerate(folders)}
    if not isinstance(class_indexing, dict) or not all(isinstance(k, str) and isinstance(v, int) and v >= 0
                                                        for k, v in class_indexing.items()):
        raise DatasetError(f"ImageFolderDataset: class_indexing must map folder names (str) to ints >= 0, got "
                           f"{class_indexing!r}")
    missing = sorted(set(class_indexing) - set(folders))
    if missing:
        raise DatasetError(f"ImageFolderDataset: class_indexing names folders {missing} that are not in "
                           f"{str(root)!r} (its folders: {folders})")
    return dict(class_indexing)


class _FolderReader:
    def __init__(self, files: list[tuple[str, int]], decode: bool):
        self.files, self.decode = files, decode

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> Row:
        path, label = self.files[i]
        try:
            data = np.fromfile(path, dtype=np.uint8)
        except OSError as exc:
            raise DatasetError(f"ImageFolderDataset: cannot read {path}: {exc}") from exc
        image = decode_image(data.tobytes(), path) if self.decode else data
        return image, np.asarray(label, dtype=np.int32)


class ImageFolderDataset(SourceDataset):
    """Images and int32 labels from a folder-per-class tree (see the module docstring)."""

    def __init__(self, dataset_dir: str | os.PathLike, num_samples: int | None = None,
                 num_parallel_workers: int | None = None, shuffle: bool | None = None, sampler: Any = None,
                 extensions: Sequence[str] | None = None, class_indexing: dict[str, int] | None = None,
                 decode: bool = False, num_shards: int | None = None, shard_id: int | None = None,
                 cache: Any = None):
        check_no_cache(cache, "ImageFolderDataset")
        root = require_dir(dataset_dir, "ImageFolderDataset")
        if extensions is not None and (isinstance(extensions, str) or not all(isinstance(e, str) for e in extensions)):
            raise DatasetError(f"ImageFolderDataset: extensions must be a list of suffixes like ['.jpg', '.JPEG'], "
                               f"got {extensions!r}")
        self._class_indexing = _classes(root, class_indexing)
        wanted = set(extensions) if extensions else None
        files = []
        for name, label in sorted(self._class_indexing.items()):
            for path in sorted((root / name).iterdir()):
                if path.is_file() and not path.name.startswith(".") and (wanted is None or path.suffix in wanted):
                    files.append((str(path), label))
        if not files:
            raise DatasetError(f"ImageFolderDataset: no image files in the class folders of {str(root)!r}"
                               + (f" with extensions {sorted(wanted)}" if wanted else ""))
        self.decode = bool(decode)
        super().__init__(_FolderReader(files, self.decode), ["image", "label"], num_samples=num_samples,
                         num_parallel_workers=num_parallel_workers, shuffle=shuffle, sampler=sampler,
                         num_shards=num_shards, shard_id=shard_id,
                         num_classes=len(set(self._class_indexing.values())))

    def get_class_indexing(self) -> dict[str, int]:
        return dict(self._class_indexing)
