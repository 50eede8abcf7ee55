"""Readers on tiny files in the real formats: exact pixels and labels, sharding, and clear errors."""

import pickle
import sys
import types

import numpy as np
import pytest
from dsfiles import (
    cifar10_dir,
    images,
    write_cifar10_bin,
    write_cifar10_py,
    write_cifar100_bin,
    write_cifar100_py,
    write_mnist,
)

import graphpar.dataset as ds
from graphpar.errors import DatasetError


def _rows(dataset):
    return list(dataset.iter_epoch(0))


def _parts(n_files=2, per_file=3, n_test=2):
    parts = {f"data_batch_{k + 1}": (images(per_file, k * per_file), np.arange(k * per_file, (k + 1) * per_file) % 10)
             for k in range(n_files)}
    parts["test_batch"] = (images(n_test, 100), np.array([9, 0][:n_test]))
    return parts


@pytest.mark.parametrize("fmt", ["bin", "py"])
def test_cifar10_exact_pixels_and_labels(tmp_path, fmt):
    parts = _parts()
    if fmt == "bin":
        folder = write_cifar10_bin(tmp_path, {f"{k}.bin": v for k, v in parts.items()})
    else:
        folder = write_cifar10_py(tmp_path, parts)
    expected_images = np.concatenate([parts[k][0] for k in ("data_batch_1", "data_batch_2", "test_batch")])
    expected_labels = np.concatenate([parts[k][1] for k in ("data_batch_1", "data_batch_2", "test_batch")])
    for where in (folder, tmp_path):  # the batches folder itself, or its parent
        data = ds.Cifar10Dataset(str(where), shuffle=False)
        assert data.get_col_names() == ["image", "label"]
        assert data.get_dataset_size() == 8 and data.num_classes() == 10
        rows = _rows(data)
        np.testing.assert_array_equal(np.stack([r[0] for r in rows]), expected_images)
        assert [int(r[1]) for r in rows] == expected_labels.tolist()
        assert rows[0][0].dtype == np.uint8 and rows[0][0].shape == (32, 32, 3)
        assert rows[0][1].dtype == np.uint32 and rows[0][1].shape == ()
    train = _rows(ds.Cifar10Dataset(str(folder), usage="train", shuffle=False))
    test = _rows(ds.Cifar10Dataset(str(folder), usage="test", shuffle=False))
    assert [int(r[0][0, 0, 0]) for r in train] == [0, 1, 2, 3, 4, 5]
    assert [int(r[0][0, 0, 0]) for r in test] == [100, 101]


def test_cifar10_binary_and_python_formats_agree(tmp_path):
    parts = _parts()
    write_cifar10_bin(tmp_path / "a", {f"{k}.bin": v for k, v in parts.items()})
    write_cifar10_py(tmp_path / "b", parts)
    a = _rows(ds.Cifar10Dataset(str(tmp_path / "a"), shuffle=False))
    b = _rows(ds.Cifar10Dataset(str(tmp_path / "b"), shuffle=False))
    for (ia, la), (ib, lb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        assert la == lb and la.dtype == lb.dtype


@pytest.mark.parametrize("fmt", ["bin", "py"])
def test_cifar100_columns_and_labels(tmp_path, fmt):
    imgs = images(4)
    fine, coarse = np.array([99, 5, 0, 42]), np.array([19, 1, 0, 8])
    parts = {"train": (imgs, fine, coarse), "test": (images(1, 50), np.array([7]), np.array([3]))}
    if fmt == "bin":
        write_cifar100_bin(tmp_path, {f"{k}.bin": v for k, v in parts.items()})
    else:
        write_cifar100_py(tmp_path, parts)
    data = ds.Cifar100Dataset(str(tmp_path), usage="train", shuffle=False)
    assert data.get_col_names() == ["image", "fine_label", "coarse_label"]
    rows = _rows(data)
    np.testing.assert_array_equal(np.stack([r[0] for r in rows]), imgs)
    assert [int(r[1]) for r in rows] == fine.tolist()
    assert [int(r[2]) for r in rows] == coarse.tolist()
    assert ds.Cifar100Dataset(str(tmp_path), shuffle=False).get_dataset_size() == 5


@pytest.mark.parametrize("num_shards", [1, 2, 3, 8])
@pytest.mark.parametrize("shuffle", [False, True])
def test_cifar_shards_are_disjoint_equal_and_complete(tmp_path, num_shards, shuffle):
    folder = cifar10_dir(tmp_path, n_train=10, n_test=0 or 1)
    total = 11
    per_shard = -(-total // num_shards)
    for epoch in (0, 1):
        seen = []
        for shard in range(num_shards):
            data = ds.Cifar10Dataset(str(folder), num_shards=num_shards, shard_id=shard, shuffle=shuffle)
            assert data.get_dataset_size() == per_shard
            assert data.shard_info() == (num_shards, shard)
            seen.append([int(r[0][0, 0, 0]) for r in data.iter_epoch(epoch)])
        flat = [v for s in seen for v in s]
        assert set(flat) == set(range(10)) | {200}  # every sample at least once
        assert len(flat) - len(set(flat)) == per_shard * num_shards - total  # only the padding repeats
        assert all(len(s) == per_shard for s in seen)


def test_truncated_cifar_bin_names_file_size_and_offset(tmp_path):
    folder = cifar10_dir(tmp_path, n_train=5, n_test=2)
    path = folder / "data_batch_1.bin"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DatasetError) as err:
        ds.Cifar10Dataset(str(folder))
    message = str(err.value)
    assert str(path) in message and str(5 * 3073 - 100) in message and f"byte offset {4 * 3073}" in message


def test_corrupt_cifar_label_names_file_and_offset(tmp_path):
    folder = cifar10_dir(tmp_path, n_train=5, n_test=2)
    path = folder / "test_batch.bin"
    data = bytearray(path.read_bytes())
    data[3073] = 12  # label byte of record 1
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as err:
        ds.Cifar10Dataset(str(folder), usage="test")
    assert str(path) in str(err.value) and "byte offset 3073" in str(err.value) and "12" in str(err.value)


def test_corrupt_and_malicious_cifar_pickles_are_refused(tmp_path):
    folder = write_cifar10_py(tmp_path, _parts(n_files=1))
    (folder / "data_batch_1").write_bytes(b"\x80\x02garbage that is not a pickle")
    with pytest.raises(DatasetError, match="data_batch_1"):
        ds.Cifar10Dataset(str(folder))

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (folder / "data_batch_1").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(DatasetError, match="refusing to load builtins.print"):
        ds.Cifar10Dataset(str(folder))


def test_missing_directory_and_files_are_clear(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        ds.Cifar10Dataset(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"no CIFAR files .*data_batch"):
        ds.Cifar10Dataset(str(tmp_path / "empty"))
    with pytest.raises(DatasetError, match="usage must be one of"):
        ds.Cifar10Dataset(str(tmp_path), usage="validation")


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_idx_exact(tmp_path, compress):
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    test = rng.integers(0, 256, size=(2, 28, 28), dtype=np.uint8)
    write_mnist(tmp_path, "train", train, np.array([3, 1, 4, 1, 5]), compress)
    write_mnist(tmp_path, "t10k", test, np.array([9, 2]), compress)
    data = ds.MnistDataset(str(tmp_path), shuffle=False)
    rows = _rows(data)
    assert data.get_dataset_size() == 7 and data.get_col_names() == ["image", "label"]
    np.testing.assert_array_equal(np.stack([r[0] for r in rows])[..., 0], np.concatenate([train, test]))
    assert rows[0][0].shape == (28, 28, 1) and rows[0][1].dtype == np.uint32
    assert [int(r[1]) for r in rows] == [3, 1, 4, 1, 5, 9, 2]
    assert ds.MnistDataset(str(tmp_path), usage="test").get_dataset_size() == 2


def test_mnist_truncated_and_bad_magic(tmp_path):
    write_mnist(tmp_path, "train", np.zeros((4, 28, 28), np.uint8), np.array([0, 1, 2, 3]))
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DatasetError) as err:
        ds.MnistDataset(str(tmp_path), usage="train")
    assert str(path) in str(err.value) and f"byte offset {16 + 3 * 784}" in str(err.value)
    write_mnist(tmp_path, "train", np.zeros((4, 28, 28), np.uint8), np.array([0, 1, 2, 3]))
    labels = tmp_path / "train-labels-idx1-ubyte"
    labels.write_bytes(b"\x00\x00\x08\x03" + labels.read_bytes()[4:])
    with pytest.raises(DatasetError, match="magic number 2051 at byte offset 0, expected 2049"):
        ds.MnistDataset(str(tmp_path), usage="train")
    with pytest.raises(DatasetError, match="t10k-images-idx3-ubyte"):
        ds.MnistDataset(str(tmp_path), usage="test")


def test_image_folder_classes_bytes_and_decode(tmp_path):
    files = {"cat": [b"c1", b"c2"], "ant": [b"a1"], "dog": [b"d1", b"d2", b"d3"]}
    for cls, contents in files.items():
        (tmp_path / cls).mkdir()
        for i, content in enumerate(contents):
            (tmp_path / cls / f"{i}.jpg").write_bytes(content)
        (tmp_path / cls / "notes.txt").write_bytes(b"ignored")
    data = ds.ImageFolderDataset(str(tmp_path), extensions=[".jpg"], shuffle=False)
    assert data.get_class_indexing() == {"ant": 0, "cat": 1, "dog": 2} and data.num_classes() == 3
    rows = _rows(data)
    assert [bytes(r[0]) for r in rows] == [b"a1", b"c1", b"c2", b"d1", b"d2", b"d3"]
    assert [int(r[1]) for r in rows] == [0, 1, 1, 2, 2, 2] and rows[0][1].dtype == np.int32
    picked = ds.ImageFolderDataset(str(tmp_path), extensions=[".jpg"], class_indexing={"dog": 0, "cat": 5},
                                   shuffle=False)
    assert [int(r[1]) for r in _rows(picked)] == [5, 5, 0, 0, 0]
    assert ds.ImageFolderDataset(str(tmp_path), shuffle=False).get_dataset_size() == 9  # no filter: all files
    with pytest.raises(DatasetError, match="not in"):
        ds.ImageFolderDataset(str(tmp_path), class_indexing={"bird": 0})


def test_image_folder_decode_png(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    (tmp_path / "a").mkdir()
    pixels = images(1)[0]
    pil.fromarray(pixels).save(tmp_path / "a" / "x.png")
    (image, label), = _rows(ds.ImageFolderDataset(str(tmp_path), decode=True))
    np.testing.assert_array_equal(image, pixels)
    raw, = _rows(ds.ImageFolderDataset(str(tmp_path)).map(ds.vision.Decode(), "image").project("image"))
    np.testing.assert_array_equal(raw[0], pixels)


def test_tfds_missing_package_is_clear(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(DatasetError, match="pip install tensorflow-datasets array_record"):
        ds.TFDSDataset("mnist", data_dir=str(tmp_path))


def test_tfds_reads_a_prepared_source_without_download(tmp_path, monkeypatch):
    calls = []

    def data_source(name, split, data_dir, download):
        calls.append((name, split, data_dir, download))
        return [{"image": np.full((2, 2, 1), i, np.uint8), "label": i % 3} for i in range(5)]

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", types.SimpleNamespace(data_source=data_source))
    data = ds.TFDSDataset("toy", data_dir=str(tmp_path), split="test", shuffle=False)
    assert calls[0] == ("toy", "test", str(tmp_path), False)
    assert data.get_col_names() == ["image", "label"] and data.get_dataset_size() == 5
    assert [int(r[1]) for r in _rows(data)] == [0, 1, 2, 0, 1]
