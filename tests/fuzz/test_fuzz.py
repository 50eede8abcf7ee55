"""Fuzzing with hypothesis: strategies given to ``shard()``, IR dumps read by ``graphpar ir``, launcher environment
variables, CIFAR-10/MNIST files with corrupted bytes, strategy-file JSON. Whatever the input, only graphpar's own
error types escape (``graphpar.errors.GraphparError``), and nothing hangs (hypothesis' deadline per example).

Each property runs twice: a bounded number of examples in the default suite, many more under ``-m slow``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphpar.errors import GraphparError

# a per-example deadline catches a hang (generous: this machine is shared); derandomized in the default suite
FAST = settings(max_examples=15, deadline=30000, suppress_health_check=list(HealthCheck), derandomize=True,
                database=None)
SLOW = settings(max_examples=400, deadline=30000, suppress_health_check=list(HealthCheck))


def both(property_fn, *strategies):
    """(default-suite test, slow test) of ``property_fn`` over ``strategies``."""
    fast = FAST(given(*strategies)(property_fn))
    slow = pytest.mark.slow(SLOW(given(*strategies)(property_fn)))
    return fast, slow


def only_graphpar_errors(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except GraphparError:
        pass


# --- strategies given to shard() ------------------------------------------------------------------------------
_atoms = st.one_of(st.integers(-3, 9), st.floats(allow_nan=True), st.none(), st.booleans(), st.text(max_size=3))
_nested = st.recursive(_atoms, lambda inner: st.one_of(st.tuples(inner, inner), st.lists(inner, max_size=4),
                                                       st.tuples(inner)), max_leaves=12)
_OPS = ("MatMul", "Add", "ReLU", "BiasAdd", "Mul", "Softmax")


def _shard(op_name, strategy):
    from graphpar import ops

    only_graphpar_errors(getattr(ops, op_name)().shard, strategy)


test_shard_strategy, test_shard_strategy_slow = both(_shard, st.sampled_from(_OPS), _nested)


def _check_ranks(strategy, shapes):
    from graphpar.ops.strategy import check_ranks

    only_graphpar_errors(check_ranks, "matmul", "Default/net", strategy, shapes, ["x", "y"][:len(shapes)])


_splits = st.tuples(*[st.integers(1, 8)] * 2) | st.tuples(st.integers(1, 8)) | st.tuples(*[st.integers(1, 4)] * 3)
test_strategy_ranks, test_strategy_ranks_slow = both(
    _check_ranks, st.tuples(_splits, _splits) | st.tuples(_splits),
    st.lists(st.tuples(*[st.integers(1, 16)] * 2) | st.tuples(st.integers(1, 16)), min_size=1, max_size=3))


# --- IR dumps -------------------------------------------------------------------------------------------------
_DUMPS: list[str] = []


def _dump_texts() -> list[str]:
    """The IR dumps of a tiny semi-auto-parallel training step (made once per session)."""
    if _DUMPS:
        return _DUMPS
    import tempfile

    import graphpar as ms
    import graphpar.dataset as ds
    from graphpar import Parameter, Tensor, nn, ops
    from graphpar.train import Model

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.ones((8, 4), np.float32)), "w")
            self.matmul = ops.MatMul().shard(((2, 4), (4, 1)))
            self.relu = ops.ReLU()

        def construct(self, x):
            return self.relu(self.matmul(x, self.w))

    folder = tempfile.mkdtemp()
    ms.set_context(save_graphs=2, save_graphs_path=folder)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    try:
        net = Net()
        data = ds.NumpySlicesDataset((np.ones((16, 8), np.float32), np.ones((16, 4), np.float32)), ["x", "y"],
                                     shuffle=False).batch(8)
        Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(1, data)
    finally:
        ms.context.reset_context()
        ms.context.reset_auto_parallel_context()
    _DUMPS.extend(p.read_text() for p in sorted(Path(folder).rglob("*.ir")))
    assert _DUMPS, "no IR dump was written"
    return _DUMPS


_edit = st.tuples(st.sampled_from(["delete", "duplicate", "replace", "truncate", "insert", "swap"]),
                  st.integers(0, 10 ** 6), st.integers(0, 10 ** 6), st.text(max_size=20))


def _mutate(text: str, edits) -> str:
    lines = text.splitlines()
    for kind, a, b, junk in edits:
        if not lines:
            break
        i, j = a % len(lines), b % len(lines)
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(j, lines[i])
        elif kind == "replace":
            line = lines[i]
            k = b % (len(line) + 1)
            lines[i] = line[:k] + junk + line[k + len(junk):]
        elif kind == "truncate":
            lines[i] = lines[i][: b % (len(lines[i]) + 1)]
        elif kind == "insert":
            lines.insert(i, junk)
        else:
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + "\n"


def _ir(which, edits):
    from graphpar.cli.main import main
    from graphpar.dump.reader import parse_text

    texts = _dump_texts()
    text = _mutate(texts[which % len(texts)], edits)
    only_graphpar_errors(parse_text, text, "fuzzed.ir")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("step_parallel_begin_0000.ir" if "begin" in text[:200] else "01_execute_0000.ir")
        path.write_text(text)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            for command in (["ir", "show", str(path)], ["ir", "summary", str(path)]):
                code = main(command)
                assert code in (0, 2), (command, code)
                if code == 2:
                    assert str(path) in err.getvalue() or "fuzzed" in err.getvalue(), err.getvalue()


test_ir_dump_reader, test_ir_dump_reader_slow = both(_ir, st.integers(0, 10), st.lists(_edit, min_size=1,
                                                                                          max_size=4))


# --- environment variables ------------------------------------------------------------------------------------
_VARS = ("GRAPHPAR_COORDINATOR", "GRAPHPAR_NUM_PROCESSES", "GRAPHPAR_PROCESS_ID", "GRAPHPAR_LOCAL_DEVICES",
         "GRAPHPAR_CLUSTER_TIMEOUT", "MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_TOPO_TIMEOUT",
         "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID",
         "SLURM_STEP_NODELIST", "RANK_SIZE", "RANK_ID", "DEVICE_ID", "MS_ENABLE_RECOVERY")
_PLACEMENT = re.compile(r"^(GRAPHPAR_|MS_|OMPI_|PMIX_|SLURM_|RANK_)|^DEVICE_ID$")
_value = st.one_of(st.integers(-2, 70000).map(str), st.sampled_from(["", " ", "abc", "1.5", "127.0.0.1:1", "x:y",
                                                                      "MS_WORKER", "MS_SCHED", "node[1-3]", "0x10"]),
                   st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                           max_size=8))


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    saved = dict(os.environ)
    for name in list(os.environ):
        if _PLACEMENT.match(name):
            del os.environ[name]
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _env_parsing(values):
    from graphpar import _env
    from graphpar.communication import bootstrap, process_plan

    with _environment(values):
        env = _env.cluster_env()  # never raises: unusable values are listed, refused only where they apply
        kind = process_plan.convention(env)
        if kind is None:
            return
        try:
            bootstrap._check_variables(env, kind)
            process_plan.timeouts(env)
            if kind == "launch":
                process_plan.from_launcher(env).bind_address
            elif kind == "slurm":
                process_plan.from_slurm(env)
            elif kind == "openmpi" and env.coordinator:
                process_plan.from_openmpi(env, 0.01)
            elif kind == "rank_table" and env.coordinator:
                process_plan.from_rank_table(env, 0.01)
        except GraphparError:
            pass


test_env_parsing, test_env_parsing_slow = both(_env_parsing, st.dictionaries(st.sampled_from(_VARS), _value,
                                                                             max_size=6))


# --- dataset readers on corrupted bytes -----------------------------------------------------------------------
def _corrupt(data: bytes, edits) -> bytes:
    buf = bytearray(data)
    for kind, pos, value in edits:
        if not buf:
            break
        pos %= len(buf)
        if kind == "flip":
            buf[pos] ^= value & 0xFF or 1
        elif kind == "truncate":
            del buf[pos:]
        else:
            buf[pos:pos] = bytes([value & 0xFF]) * (value % 7 + 1)
    return bytes(buf)


_byte_edits = st.lists(st.tuples(st.sampled_from(["flip", "truncate", "extend"]), st.integers(0, 10 ** 6),
                                 st.integers(0, 255)), min_size=1, max_size=4)


def _read_all(dataset) -> None:
    for _ in dataset.create_tuple_iterator(output_numpy=True):
        pass


def _cifar(which, edits):
    import tempfile

    import graphpar.dataset as ds
    from tests.dataset import dsfiles

    with tempfile.TemporaryDirectory() as root:
        folder = dsfiles.cifar10_dir(Path(root), n_train=2, n_test=1, per_file=1)
        files = sorted(folder.glob("*.bin"))
        victim = files[which % len(files)]
        victim.write_bytes(_corrupt(victim.read_bytes(), edits))
        for usage in ("train", "test"):
            only_graphpar_errors(lambda: _read_all(ds.Cifar10Dataset(str(folder), usage=usage)))


def _mnist(which, edits):
    import tempfile

    import graphpar.dataset as ds
    from tests.dataset import dsfiles

    with tempfile.TemporaryDirectory() as root:
        for prefix in ("train", "t10k"):
            dsfiles.write_mnist(Path(root), prefix, np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28),
                                np.arange(3, dtype=np.uint8))
        files = sorted(Path(root).iterdir())
        victim = files[which % len(files)]
        victim.write_bytes(_corrupt(victim.read_bytes(), edits))
        for usage in ("train", "test"):
            only_graphpar_errors(lambda: _read_all(ds.MnistDataset(root, usage=usage)))


test_cifar_reader, test_cifar_reader_slow = both(_cifar, st.integers(0, 5), _byte_edits)
test_mnist_reader, test_mnist_reader_slow = both(_mnist, st.integers(0, 3), _byte_edits)


# --- strategy-file JSON ---------------------------------------------------------------------------------------
_json = st.recursive(st.none() | st.booleans() | st.integers(-5, 10) | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["parallel_layout_item", "dev_matrix", "tensor_map", "param_split_shape",
                                          "indices_offset", "parallel_strategy_item", "graphpar", "strategy",
                                          "w", "x", "version", "device_num"]) | st.text(max_size=4),
                         inner, max_size=4), max_leaves=20)


def _strategy_file(body, raw):
    import tempfile

    from graphpar.planner import strategy_file

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "strategy.json"
        path.write_text(raw if raw is not None else json.dumps(body))
        only_graphpar_errors(strategy_file.read, str(path))


test_strategy_file_json, test_strategy_file_json_slow = both(_strategy_file, _json,
                                                             st.none() | st.text(max_size=30))
