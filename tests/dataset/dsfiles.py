"""Writers of tiny datasets in the real on-disk formats, with contents the tests can predict."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np


def images(n: int, offset: int = 0) -> np.ndarray:
    """(n, 32, 32, 3) uint8 images; image i has pixel [0, 0, 0] == offset + i and distinct planes."""
    y, x = np.mgrid[0:32, 0:32]
    out = np.empty((n, 32, 32, 3), np.uint8)
    for i in range(n):
        for c in range(3):
            out[i, :, :, c] = (y * 7 + x * 3 + c * 50 + (offset + i) * 11) % 256
        out[i, 0, 0, 0] = offset + i
    return out


def cifar_records(imgs: np.ndarray, *label_columns: np.ndarray) -> bytes:
    planes = imgs.transpose(0, 3, 1, 2).reshape(len(imgs), 3072)
    labels = [np.asarray(col, np.uint8)[:, None] for col in label_columns]
    return np.concatenate(labels + [planes], axis=1).astype(np.uint8).tobytes()


def write_cifar10_bin(root: Path, parts: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    """``parts`` maps file names (data_batch_1.bin, test_batch.bin) to (images, labels)."""
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (imgs, labels) in parts.items():
        (folder / name).write_bytes(cifar_records(imgs, labels))
    return folder


def write_cifar10_py(root: Path, parts: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (imgs, labels) in parts.items():
        batch = {b"batch_label": name.encode(), b"labels": [int(v) for v in labels],
                 b"data": imgs.transpose(0, 3, 1, 2).reshape(len(imgs), 3072).copy(),
                 b"filenames": [f"{i}.png".encode() for i in range(len(imgs))]}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    return folder


def write_cifar100_bin(root: Path, parts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Path:
    """``parts`` maps train.bin/test.bin to (images, fine, coarse); records hold coarse, then fine."""
    folder = root / "cifar-100-binary"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (imgs, fine, coarse) in parts.items():
        (folder / name).write_bytes(cifar_records(imgs, coarse, fine))
    return folder


def write_cifar100_py(root: Path, parts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Path:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (imgs, fine, coarse) in parts.items():
        batch = {b"fine_labels": [int(v) for v in fine], b"coarse_labels": [int(v) for v in coarse],
                 b"data": imgs.transpose(0, 3, 1, 2).reshape(len(imgs), 3072).copy()}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    return folder


def write_idx(path: Path, array: np.ndarray, magic: int, compress: bool = False) -> Path:
    header = np.array([magic, *array.shape], dtype=">u4").tobytes()
    data = header + np.ascontiguousarray(array, np.uint8).tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def write_mnist(root: Path, prefix: str, imgs: np.ndarray, labels: np.ndarray, compress: bool = False) -> None:
    root.mkdir(parents=True, exist_ok=True)
    write_idx(root / f"{prefix}-images-idx3-ubyte", imgs, 2051, compress)
    write_idx(root / f"{prefix}-labels-idx1-ubyte", labels, 2049, compress)


def cifar10_dir(root: Path, n_train: int = 10, n_test: int = 4, per_file: int = 5) -> Path:
    """A CIFAR-10 binary folder: train images 0..n_train-1 over several files, then test images; label i % 10."""
    parts = {}
    for k, start in enumerate(range(0, n_train, per_file), start=1):
        count = min(per_file, n_train - start)
        parts[f"data_batch_{k}.bin"] = (images(count, start), (np.arange(start, start + count) % 10))
    parts["test_batch.bin"] = (images(n_test, 200), np.arange(n_test) % 10)
    return write_cifar10_bin(root, parts)
