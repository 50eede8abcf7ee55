"""MindSpore 2.x APIs the documentation's samples use, each as MindSpore documents it (issue 22, deliverable 4):
Tensor methods, ``nn.MAELoss``, ``ms.parallel.nn``, ``MS_DEV_SAVE_GRAPHS``, MNIST's default ``usage``,
``vision.SlicePatches``."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import Tensor, nn
from graphpar.errors import CellError, DatasetError, EnvVarError

ROOT = Path(__file__).resolve().parents[2]


# --- Tensor methods ---------------------------------------------------------------------------------------------
def test_tensor_asnumpy_numpy_dim():
    t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    host = t.asnumpy()
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    np.testing.assert_array_equal(host, np.arange(6).reshape(2, 3))
    host[0, 0] = 42.0  # a copy, as MindSpore's: the tensor is unchanged
    assert float(t[0, 0]) == 0.0
    np.testing.assert_array_equal(t.numpy(), t.asnumpy())
    assert t.dim() == 2
    # the other methods the samples use are jax.Array's own, with MindSpore's meaning
    assert t.shape == (2, 3) and t.dtype == ms.float32 and t.astype(ms.float16).dtype == ms.float16
    assert t.sum().item() == 15.0 and t.size == 6 and t.ndim == 2


def test_tensor_dtype_conversions_on_values_and_in_a_compiled_construct():
    t = Tensor(np.array([[1.7, -2.2], [3.5, 0.0]], np.float32))
    assert t.long().dtype == jnp.int32  # int64 is int32 unless JAX's x64 mode is on, as for Tensor(1)
    np.testing.assert_array_equal(t.int().asnumpy(), [[1, -2], [3, 0]])  # truncated, as MindSpore's
    assert t.half().dtype == ms.float16 and t.bfloat16().dtype == ms.bfloat16 and t.float().dtype == ms.float32
    assert t.bool().asnumpy().tolist() == [[True, True], [True, False]]
    assert t.byte().dtype == jnp.uint8 and t.short().dtype == jnp.int16 and t.double().dtype == jnp.float32

    class Net(nn.Cell):  # MindSpore's test_reshape_shard_propagation::test_standalone, in a compiled construct
        def __init__(self):
            super().__init__()
            self.relu = ms.ops.ReLU()
            self.to_scalar = ms.ops.operations._sequence_ops.TensorToScalar()

        def construct(self, x):
            return self.to_scalar(self.relu(x).long().max())

    out = Net()(Tensor(np.full((4, 3), 2.6, np.float32)))  # GRAPH_MODE: the call is compiled
    assert int(out) == 2
    assert jax.jit(lambda x: x.long().max())(t).dtype == jnp.int32  # a tracer has them too


def test_tensor_asnumpy_inside_a_compiled_program_says_why():
    with pytest.raises(CellError, match=r"Tensor.asnumpy\(\) inside a compiled program.*ops.Print"):
        jax.jit(lambda x: x.asnumpy())(jnp.ones(2))


# --- nn.MAELoss -------------------------------------------------------------------------------------------------
def test_mae_loss_reductions_and_broadcast():
    logits, labels = Tensor(np.array([1.0, 2.0, 3.0])), Tensor(np.array([1.0, 2.0, 2.0]))
    np.testing.assert_allclose(nn.MAELoss()(logits, labels).asnumpy(), 1.0 / 3.0, rtol=1e-6)
    assert float(nn.MAELoss("sum")(logits, labels)) == 1.0
    wide = Tensor(np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 2.0]]))
    np.testing.assert_array_equal(nn.MAELoss("none")(logits, wide).asnumpy(), [[0, 1, 2], [0, 0, 1]])
    with pytest.raises(ValueError, match="reduction"):
        nn.MAELoss("max")


# --- ms.parallel.nn ---------------------------------------------------------------------------------------------
def test_parallel_nn_is_an_attribute_without_importing_it():
    code = "import graphpar as ms; print(ms.parallel.nn.Pipeline.__name__, ms.parallel.nn.GradAccumulation.__name__)"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Pipeline", "GradAccumulation"]


# --- MS_DEV_SAVE_GRAPHS -----------------------------------------------------------------------------------------
def _train_one_step():
    net = nn.Dense(4, 2)
    model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1))
    data = ds.NumpySlicesDataset((np.ones((8, 4), np.float32), np.zeros((8, 2), np.float32)),
                                 ["x", "y"], shuffle=False).batch(8)
    model.train(1, data)


def test_ms_dev_save_graphs_writes_the_dumps(tmp_path, monkeypatch):
    monkeypatch.setenv("MS_DEV_SAVE_GRAPHS", "2")  # set after the imports, as the samples do
    monkeypatch.setenv("MS_DEV_SAVE_GRAPHS_PATH", str(tmp_path / "env_dumps"))
    assert ms.get_context("save_graphs") == 2
    _train_one_step()
    dumps = sorted(p.name for p in (tmp_path / "env_dumps").rglob("*.ir"))
    assert any(n.startswith("step_parallel_begin") for n in dumps) and any("_execute_" in n for n in dumps)


def test_ms_dev_save_graphs_zero_wins_over_set_context_and_bad_values_are_refused(tmp_path, monkeypatch):
    ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path / "ctx"))
    monkeypatch.setenv("MS_DEV_SAVE_GRAPHS", "0")
    assert ms.get_context("save_graphs") == 0
    _train_one_step()
    assert not (tmp_path / "ctx").exists()
    monkeypatch.setenv("MS_DEV_SAVE_GRAPHS", "yes")
    with pytest.raises(EnvVarError, match=r"MS_DEV_SAVE_GRAPHS='yes'.*0 \(off\), 1, 2 or 3"):
        ms.get_context("save_graphs")


# --- MnistDataset's default usage -------------------------------------------------------------------------------
def _write_idx(path: Path, array: np.ndarray, magic: int) -> None:
    header = np.array([magic, *array.shape], dtype=">u4").tobytes()
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _write_split(root: Path, prefix: str, labels: list[int]) -> np.ndarray:
    images = np.arange(len(labels) * 28 * 28, dtype=np.int64).reshape(len(labels), 28, 28) % 251
    _write_idx(root / f"{prefix}-images-idx3-ubyte", images, 2051)
    _write_idx(root / f"{prefix}-labels-idx1-ubyte", np.array(labels), 2049)
    return images


def test_mnist_default_usage_reads_the_train_pair_alone(tmp_path):
    images = _write_split(tmp_path, "train", [3, 1, 4])  # MNIST_Data/train/ holds the train pair only
    rows = list(ds.MnistDataset(str(tmp_path), shuffle=False).create_tuple_iterator(output_numpy=True))
    assert [int(r[1]) for r in rows] == [3, 1, 4]
    np.testing.assert_array_equal(rows[2][0][:, :, 0], images[2])
    with pytest.raises(DatasetError, match="t10k-images-idx3-ubyte"):
        ds.MnistDataset(str(tmp_path), usage="test")


def test_mnist_default_usage_reads_both_splits_train_first_and_refuses_half_pairs(tmp_path):
    _write_split(tmp_path, "train", [3, 1])
    _write_split(tmp_path, "t10k", [9])
    data = ds.MnistDataset(str(tmp_path), shuffle=False)
    assert [int(r[1]) for r in data.create_tuple_iterator(output_numpy=True)] == [3, 1, 9]
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetError, match="holds t10k-images-idx3-ubyte but not t10k-labels-idx1-ubyte"):
        ds.MnistDataset(str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="holds no MNIST idx files"):
        ds.MnistDataset(str(empty))


# --- vision.SlicePatches ----------------------------------------------------------------------------------------
def test_slice_patches_pad_and_drop():
    img = np.arange(5 * 6 * 3, dtype=np.uint8).reshape(5, 6, 3)
    patches = ds.vision.SlicePatches(2, 3, fill_value=7)(img)
    assert len(patches) == 6 and all(p.shape == (3, 2, 3) for p in patches)
    np.testing.assert_array_equal(patches[0], img[0:3, 0:2])
    np.testing.assert_array_equal(patches[5][:2], img[3:5, 4:6])  # row 1, column 2
    assert (patches[5][2] == 7).all()  # the bottom edge padded with fill_value
    dropped = ds.vision.SlicePatches(2, 4, ds.vision.SliceMode.DROP)(img)
    assert len(dropped) == 8 and all(p.shape == (2, 1, 3) for p in dropped)
    np.testing.assert_array_equal(dropped[7], img[2:4, 3:4])
    same = ds.vision.SlicePatches()(img)
    np.testing.assert_array_equal(same, img)
    with pytest.raises(DatasetError, match="num_height must be a positive int"):
        ds.vision.SlicePatches(0, 2)


def test_slice_patches_in_a_pipeline_one_column_per_patch():
    data = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4, 1)
    cols = [f"img{k}" for k in range(4)]
    pipe = ds.NumpySlicesDataset(data, ["image"], shuffle=False)
    pipe = pipe.map(operations=ds.vision.SlicePatches(2, 2), input_columns="image", output_columns=cols)
    pipe = pipe.project([cols[3]])
    rows = [r[0] for r in pipe.create_tuple_iterator(output_numpy=True)]
    np.testing.assert_array_equal(rows[1], data[1, 2:4, 2:4])
