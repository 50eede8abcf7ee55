"""The catalogue of bad inputs: each row is one mistake a user makes, the error graphpar gives, and the words the
message must contain (the culprit and what would be valid). ``test_catalogue.py`` runs every row;
``python -m tests.errors.catalogue`` prints docs/errors.md from the same rows and the messages they produce.

A row's ``run(tmp)`` makes the mistake (``tmp`` is a fresh directory); ``env`` is set around it (with every
launcher placement variable cleared first).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Row:
    id: str
    area: str
    mistake: str  # what the user did, as they would write it
    run: Callable[[Path], object]
    error: type | str  # the class, or "module:Class" resolved lazily
    words: tuple[str, ...]  # must all appear in the message
    env: dict[str, str] = field(default_factory=dict)

    def error_class(self) -> type:
        if isinstance(self.error, type):
            return self.error
        module, name = self.error.split(":")
        return getattr(__import__(module, fromlist=[name]), name)


# --- helpers --------------------------------------------------------------------------------------------------
def _ms():
    import graphpar

    return graphpar


def _cost_model():
    from graphpar.parallel import _cost_model_context

    return _cost_model_context


def _apc():
    from graphpar.parallel import _auto_parallel_context

    return _auto_parallel_context


def _transformer():
    from graphpar.nn import transformer

    return transformer


def _moe(experts: int, dp_mp_ep: tuple[int, int, int]):
    tr = _transformer()
    return tr.MoE(8, 16, 0.0, moe_config=tr.MoEConfig(expert_num=experts),
                  parallel_config=tr.MoEParallelConfig(*dp_mp_ep))


def _allreduce_fusion():
    from graphpar.common.api import _cell_graph_executor

    return _cell_graph_executor._get_allreduce_fusion(_ms().nn.Dense(2, 2))


def _grad_reducer_semi_auto():
    _ms().set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    return _ms().nn.DistributedGradReducer([])


def _full_batch_data_parallel():
    ms = _ms()
    ms.set_auto_parallel_context(parallel_mode="data_parallel", full_batch=True)
    return ms.nn.Dense(4, 2)(ms.Tensor(np.ones((8, 4), np.float32)))


def _set_inputs_mismatch():
    ms = _ms()
    net = ms.nn.Dense(16, 2)
    net.set_inputs(ms.Tensor(shape=[None, 16], dtype=ms.float32))
    return net(ms.Tensor(np.ones((4, 8), np.float32)))


def _dynamic_gather_axis():
    ms = _ms()
    from graphpar.common.api import _cell_graph_executor

    class Lookup(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.gather = ms.ops.Gather().shard(((8, 1), (1, 1)))

        def construct(self, table, indices):
            return self.gather(table, indices, 0)

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    return _cell_graph_executor.compile(Lookup(), ms.Tensor(shape=[None, 8], dtype=ms.float32),
                                        ms.Tensor(np.ones((4, 2), np.int32)))


def _dynamic_size_branch():
    ms = _ms()
    from graphpar.common.api import _cell_graph_executor

    class Branches(ms.nn.Cell):
        def construct(self, x):
            return x * 2 if x.shape[0] > 8 else x

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    return _cell_graph_executor.compile(Branches(), ms.Tensor(shape=[None, 16], dtype=ms.float32))


def _symbol_split():
    ms = _ms()
    from graphpar.common.api import _cell_graph_executor

    class Scale(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.mul = ms.ops.Mul().shard(((8, 1), (8, 1)))

        def construct(self, x):
            return self.mul(x, x)

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    return _cell_graph_executor.compile(Scale(), ms.Tensor(shape=[ms.Symbol(divisor=2), 16], dtype=ms.float32))


def _dynamic_multi_axis_layout():
    ms = _ms()
    from graphpar.common.api import _cell_graph_executor
    from graphpar.parallel import Layout

    class Act(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.gelu = ms.ops.GeLU().shard((Layout((2, 4), ("dp", "mp"))(("dp", "mp"), "None"),))

        def construct(self, x):
            return self.gelu(x)

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    return _cell_graph_executor.compile(Act(), ms.Tensor(shape=[16, None], dtype=ms.float32))


def _tensor_attribute_in_construct():
    ms = _ms()

    class Scale(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.scale = ms.Tensor(2.0, ms.float32)

        def construct(self, x):
            self.scale = self.scale * x.mean()
            return x * self.scale

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.block = Scale()

        def construct(self, x):
            return self.block(x)

    return Net()(ms.Tensor(np.ones((8, 4), np.float32)))


def _symbol_call():
    ms = _ms()
    net = ms.nn.Dense(16, 2)
    net.set_inputs(ms.Tensor(shape=[ms.Symbol(divisor=8), 16], dtype=ms.float32))
    return net(ms.Tensor(np.ones((12, 16), np.float32)))


def _assemble_blocks():
    from graphpar.compile.plans.global_batch import assemble_blocks

    return assemble_blocks


def _launch(*argv: str):
    from graphpar.launch import cli
    from graphpar.launch.config import resolve

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return resolve(parser.parse_args(["launch", *argv]))


def _msrun(*argv: str):
    from graphpar.launch import msrun
    from graphpar.launch.config import resolve

    return resolve(msrun.launch_arguments(msrun.parser().parse_args(list(argv))))


def _roll_back():
    from graphpar.checkpoint import recovery

    return recovery.should_roll_back()


def _plan(kind: str):
    from graphpar import _env
    from graphpar.communication import bootstrap, process_plan

    env = _env.cluster_env()
    bootstrap._check_variables(env, process_plan.convention(env) or kind)
    return {"launch": process_plan.from_launcher, "rank_table": lambda e: process_plan.from_rank_table(e, 5),
            "openmpi": lambda e: process_plan.from_openmpi(e, 5), "slurm": process_plan.from_slurm}[kind](env)


def _dynamic(tmp: Path):
    from graphpar import _env
    from graphpar.communication import bootstrap

    return bootstrap._dynamic_cluster(_env.cluster_env(), 5)


def _launch_started(*argv: str):
    """``graphpar launch ARGV`` up to the checks made on this node before any process starts."""
    from graphpar.launch.supervisor import Supervisor

    return Supervisor(_launch(*argv)).run()


def _explorer_serve(port: int):
    from graphpar.viz.explorer_server import serve

    return serve([], port)


def _while_port_busy(run: Callable[[int], object]):
    """``run(port)`` while another socket listens on 127.0.0.1:port (as another job's coordinator would)."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        return run(busy.getsockname()[1])


def _coordinator_of_process_0(address: str):
    """The check process 0 makes before JAX binds ``address`` (the row's env sets the other placement variables
    and GRAPHPAR_COORDINATOR itself, so that it is restored afterwards)."""
    from graphpar.communication import port_check

    os.environ["GRAPHPAR_COORDINATOR"] = address
    return port_check.check_coordinator(_plan("launch"))


def _set_context_cpu():
    return _ms().set_context(device_target="CPU")


def _rank_table(tmp: Path, servers: int, devices: int) -> str:
    table = {"version": "1.0", "server_count": str(servers), "server_list": [
        {"server_id": f"10.0.0.{s}", "device": [{"device_id": str(d), "device_ip": "192.1.27.6",
                                                  "rank_id": str(s * devices + d)} for d in range(devices)]}
        for s in range(servers)], "status": "completed"}
    path = tmp / "rank_table.json"
    path.write_text(json.dumps(table))
    return str(path)


def _refused(tmp: Path, variant: str):
    """A worker with the ``variant`` certificate connecting to a coordinator's TLS proxy on 127.0.0.1."""
    import io

    from graphpar.communication import tls_config, tls_tunnel
    from graphpar.communication.process_plan import free_port
    from tests.communication import tls_certs

    configs = tls_certs.make(tmp / "certs")
    pw = tls_certs.PASSWORD.encode()
    proxy = tls_tunnel.TlsProxy(tls_config.load_settings(str(configs["server"]), pw, pw), ("127.0.0.1", free_port()),
                                str(tmp / "no-coordinator.sock"), log=io.StringIO()).start()
    try:
        tls_tunnel.TlsForwarder(tls_config.load_settings(str(configs[variant]), pw, pw), proxy.public).probe(10)
    finally:
        proxy.close()


def _scheduler_refuses(tmp: Path, variant: str, scheduler_tls: bool):
    """A Dynamic Cluster worker with the ``variant`` certificate registering with a scheduler on 127.0.0.1 that
    speaks TLS (``scheduler_tls``) or not."""
    import io
    import threading

    from graphpar.communication import dynamic_cluster, scheduler, tls_config
    from graphpar.communication.process_plan import free_port
    from tests.communication import tls_certs

    configs = tls_certs.make(tmp / "certs")
    pw = tls_certs.PASSWORD.encode()
    port = free_port()
    tls = tls_config.load_settings(str(configs["server"]), pw, pw) if scheduler_tls else None
    log = io.StringIO()
    server = scheduler.Scheduler("127.0.0.1", port, 2, 2.0, tls=tls, say=lambda line: print(line, file=log))
    threading.Thread(target=server.serve, daemon=True).start()
    worker = tls_config.load_settings(str(configs[variant]), pw, pw)
    dynamic_cluster.join("127.0.0.1", port, 2, "0", 5, None, tls=worker)


def _rendezvous_dir_loose(tmp: Path):
    """The one-host rendezvous directory $TMPDIR/graphpar-<uid> left with mode 0755."""
    import tempfile

    from graphpar.communication import rendezvous_file

    saved = tempfile.tempdir
    tempfile.tempdir = str(tmp)
    try:
        (tmp / f"graphpar-{os.geteuid()}").mkdir()
        os.chmod(tmp / f"graphpar-{os.geteuid()}", 0o755)
        rendezvous_file.coordinator_for("job", True, 1)
    finally:
        tempfile.tempdir = saved


def _tls_config(tmp: Path, **override) -> str:
    from tests.communication import tls_certs

    configs = tls_certs.make(tmp / "certs")
    body = json.loads(configs["valid"].read_text())
    body.update(override)
    path = tmp / "certs" / "bad.json"
    path.write_text(json.dumps(body))
    return str(path)


class _Net:
    """A tiny network: MatMul by an (8, 4) weight, with an optional mistake in construct."""

    @staticmethod
    def make(mistake: str = ""):
        from graphpar import Parameter, Tensor, nn, ops

        class Net(nn.Cell):
            def __init__(self):
                super().__init__()
                self.w = Parameter(Tensor(np.ones((8, 4), np.float32)), "w")
                self.matmul = ops.MatMul()
                self.add = ops.Add()

            def construct(self, x):
                h = self.matmul(x, self.w)
                if mistake == "flow":
                    h = h * int(h.sum() > 0)
                if mistake == "jnp":
                    import jax.numpy as jnp

                    h = h + jnp.ones((3,), h.dtype)
                return h

        return Net()


def _train(mistake: str = "", in_dim: int = 8, **strategy):
    import graphpar.dataset as ds
    from graphpar import nn
    from graphpar.train import Model

    net = _Net.make(mistake)
    if strategy:
        net.matmul.shard(strategy["in_strategy"])
        _ms().set_auto_parallel_context(parallel_mode=strategy.get("parallel_mode", "semi_auto_parallel"))
    x = np.ones((16, in_dim), np.float32)
    y = np.ones((16, 4), np.float32)
    data = ds.NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(8)
    Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(1, data)


def _jit_step(mistake: str):
    """MindSpore 2.x's functional step under ``@ms.jit`` with one mistake: "two-gradients", "no-optimizer",
    "python-float" (``float()`` of a Tensor in the step), "traced-while" (a ``while`` on a
    Tensor whose body returns), "while-shapes" (a loop changing a name's shape), "while-new-name" (a name first bound
    in a traced loop's body, read after it), "while-gradient" (a traced loop on the weights' values in the
    differentiated function), "if-return" (a traced ``if`` that returns), "one-branch" (a name bound in one branch,
    read after) or "shapes" (branches binding one name to Tensors of different shapes)."""
    from graphpar import nn

    ms = _ms()
    net = nn.Dense(8, 4)
    loss_fn, optimizer = nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9)

    def forward_fn(x, y):
        out = net(x)
        if mistake == "while-gradient":
            while out.sum() > 1.0:
                out = out * 0.5
        return loss_fn(out, y)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

    @ms.jit
    def train_step(x, y):
        loss, grads = grad_fn(x, y)
        if mistake == "two-gradients":
            grad_fn(x, y)
        if mistake == "python-float":
            loss = loss * float(loss > 1.0)
        elif mistake == "traced-while":
            while loss > 1.0:
                optimizer(grads)
                return loss
        elif mistake == "while-shapes":
            while loss > 1.0:
                loss = grads[0]
        elif mistake == "while-new-name":
            while loss > 1.0:
                loss = loss / 2
                halved = True
            loss = loss * halved
        elif mistake == "if-return":
            if not ms.amp.all_finite(grads):
                return loss
        elif mistake == "one-branch":
            if loss > 1.0:
                note = loss * 2
            loss = note
        elif mistake == "shapes":
            if loss > 1.0:
                g = grads[0]
            else:
                g = grads[1]
            loss = loss + g.sum()
        if mistake != "no-optimizer":
            optimizer(grads)
        return loss

    return train_step(np.ones((16, 8), np.float32), np.ones((16, 4), np.float32))


def _saved(tmp: Path) -> Path:
    from graphpar import Parameter, Tensor, nn

    class Small(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.arange(4, dtype=np.float32)), "w")

        def construct(self, x):
            return x * self.w

    path = tmp / "net.ckpt"
    _ms().save_checkpoint(Small(), str(path))
    return path


def _flip_a_byte(tmp: Path):
    path = _saved(tmp)
    victim = max((p for p in path.rglob("*") if p.is_file() and p.name != "graphpar.json"),
                 key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    return _ms().load_checkpoint(str(path))


def _no_manifest(tmp: Path):
    path = _saved(tmp)
    (path / "graphpar.json").unlink()
    return _ms().load_checkpoint(str(path))


def _second_writer(tmp: Path):
    """Another live process (a stand-in for job A: it holds the lock as ModelCheckpoint does) writes tmp/ckpt
    under prefix 'net'; job B's ModelCheckpoint starts there."""
    import subprocess

    from graphpar.train.callback._callback import InternalCallbackParam, RunContext

    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, json, os, socket, sys, time; os.makedirs(sys.argv[1]); "
        "fd = os.open(os.path.join(sys.argv[1], '.net.graphpar-lock'), os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, json.dumps({'pid': os.getpid(), 'host': socket.gethostname(), "
        "'job': 'job-A', 'prefix': 'net', 'since': time.time()}).encode()); print('holding', flush=True); "
        "time.sleep(60)"), str(tmp / "ckpt")], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        callback = __import__("graphpar.train", fromlist=["ModelCheckpoint"]).ModelCheckpoint("net", str(tmp / "ckpt"))
        return callback.begin(RunContext(InternalCallbackParam(cur_step_num=0)))
    finally:
        holder.kill()
        holder.wait()


def _save_over(tmp: Path, what: str):
    """save_checkpoint over a name that holds a MindSpore checkpoint file, an unrelated folder, or below a file."""
    from graphpar import Parameter, Tensor

    path = tmp / "model.ckpt"
    if what == "file":
        path.write_bytes(b"MindSpore protobuf checkpoint")
    elif what == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("mine")
    else:
        (tmp / "results").write_text("a file, not a folder")
        path = tmp / "results" / "model.ckpt"
    return _ms().save_checkpoint([Parameter(Tensor(np.ones(4, np.float32)), "w")], str(path))


def _predict_tuple_strategy_multiprocess():
    """Model.predict under a tuple dataset_strategy in a job of several processes (jax.process_count() stands in)."""
    from unittest import mock

    ms = _ms()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", dataset_strategy=((2, 1),))
    model = ms.Model(ms.nn.Dense(4, 2))
    with mock.patch("jax.process_count", return_value=2):
        return model.predict(ms.Tensor(np.ones((1, 4), np.float32)))


def _view_of_a_removed_checkpoint(tmp: Path):
    """A checkpoint saved into rank_0/ of an 8-rank job (every other rank's folder gets a view), then rank_0 removed."""
    from graphpar import Parameter, Tensor

    _ms().save_checkpoint([Parameter(Tensor(np.ones(4, np.float32)), "w")], str(tmp / "rank_0" / "net.ckpt"))
    shutil.rmtree(tmp / "rank_0")
    return _ms().load_checkpoint(str(tmp / "rank_7" / "net.ckpt"))


def _strategy_save_file_folder(tmp: Path):
    from graphpar.planner import strategy_file

    (tmp / "strategy.json").mkdir()
    return strategy_file.write(str(tmp / "strategy.json"), {"parallel_layout_item": {}})


def _cifar_truncated(tmp: Path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.dataset import dsfiles

    import graphpar.dataset as ds

    folder = dsfiles.cifar10_dir(tmp)
    victim = sorted(folder.glob("data_batch_*"))[0]
    victim.write_bytes(victim.read_bytes()[:-100])
    for _ in ds.Cifar10Dataset(str(folder)).create_tuple_iterator(output_numpy=True):
        pass


def _fully_use_devices(tmp: Path):
    """Train the tiny network under AUTO_PARALLEL with a strategy using 2 of 8 devices and fully_use_devices."""
    ms = _ms()
    ms.set_algo_parameters(fully_use_devices=True)
    ms.set_auto_parallel_context(search_mode="sharding_propagation")
    try:
        _train(in_strategy=((2, 1), (1, 1)), parallel_mode="auto_parallel")
    finally:
        ms.reset_algo_parameters()


def _strategy_file(tmp: Path, text: str):
    from graphpar.planner import strategy_file

    path = tmp / "strategy.json"
    path.write_text(text)
    return strategy_file.read(str(path))


def _strategy_of_another_network(tmp: Path):
    """Train the tiny network with a MindSpore strategy file written for another one (an encoder's weight and
    MatMul)."""
    path = tmp / "encoder_strategy.json"
    path.write_text(json.dumps({
        "current_stage": 0,
        "parallel_layout_item": {"encoder.weight": {"dev_matrix": [2, 4], "tensor_map": [0, -1],
                                                    "tensor_shape": [32, 16]}},
        "parallel_strategy_item": {"Default/network-WithLossCell/_backbone-Encoder/MatMul-op0":
                                   {"stage": 0, "parallel_strategy": [[2, 4], [4, 1]]}}}))
    _ms().set_auto_parallel_context(strategy_ckpt_config={"load_file": str(path)})
    _train(in_strategy=((2, 1), (1, 1)))


def _labels_out_of_range(tmp: Path):
    """Train a 4-class head with labels 4, 9 and -1 among the valid ones (sparse cross-entropy)."""
    import graphpar.dataset as ds
    from graphpar import nn
    from graphpar.train import Model

    x = np.tile(np.eye(4, dtype=np.float32), (4, 1))
    y = np.arange(16, dtype=np.int32) % 4
    y[[3, 9, 12]] = [4, 9, -1]
    net = nn.Dense(4, 4)
    Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
          nn.Momentum(net.trainable_params(), 0.1, 0.9)).train(1, ds.NumpySlicesDataset((x, y), ["x", "y"],
                                                                                        shuffle=False).batch(16))


def _conv_split_w():
    """Call a Conv2D (3x3 kernel, pad_mode 'valid') whose strategy splits W 2 ways, on 8 devices."""
    from graphpar import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv2d = _ops().Conv2D(8, 3, pad_mode="valid").shard(((1, 1, 1, 2), (1, 1, 1, 1)))

        def construct(self, x, w):
            return self.conv2d(x, w)

    _ms().set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    Net()(_ms().Tensor(np.ones((8, 4, 8, 8), np.float32)), _ms().Tensor(np.ones((8, 4, 3, 3), np.float32)))


def _one_op(op, *args):
    """Call ``op(*args)`` inside a Cell under SEMI_AUTO_PARALLEL on 8 devices (its strategy is checked then)."""
    from graphpar import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = op

        def construct(self, x):
            return self.op(x, *args)

    _ms().set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    Net()(_ms().Tensor(np.ones((8, 4, 16), np.float32)))


def _layer_norm_out():
    """Call a LayerNorm given an out_strategy, under SEMI_AUTO_PARALLEL on 8 devices."""
    from graphpar import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = _ops().LayerNorm().shard(((8, 1), (1,), (1,)), ((8, 1), (8, 1), (8, 1)))

        def construct(self, x, g, b):
            return self.op(x, g, b)[0]

    _ms().set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    ones = lambda *s: _ms().Tensor(np.ones(s, np.float32))
    Net()(ones(8, 16), ones(16), ones(16))


def _nd_tp_matmul():
    """A 2D tensor-parallel MatMul (enable_nd_tp) whose x splits k by the alias w's k is not split by first."""
    layout = _ms().Layout((2, 4), ("x", "y"))
    op = _ops().MatMul().shard((layout("None", ("y", "x")), layout("x", "y"))).add_prim_attr("enable_nd_tp", True)
    from graphpar import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.matmul = op

        def construct(self, x, w):
            return self.matmul(x, w)

    _ms().set_auto_parallel_context(parallel_mode="semi_auto_parallel", dataset_strategy="full_batch")
    Net()(_ms().Tensor(np.ones((8, 16), np.float32)), _ms().Tensor(np.ones((16, 8), np.float32)))


def _parameter_plan_split():
    """Cell.shard with a parameter_plan split that does not divide the Parameter."""
    from graphpar import nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = _ms().Parameter(_ms().Tensor(np.ones((32, 16), np.float32)), "w")
            self.matmul = _ops().MatMul()

        def construct(self, x):
            return self.matmul(x, self.w)

    Net().shard(in_strategy=((2, 1),), parameter_plan={"w": (1, 3)})


def _ops():
    from graphpar import ops

    return ops


def _ds():
    import graphpar.dataset as ds

    return ds



def _asnumpy_in_jit():
    import jax
    import jax.numpy as jnp

    _ms()
    return jax.jit(lambda x: x.asnumpy())(jnp.ones(2))


def _pipeline_segments(config: dict, segments: int):
    """Train 4 Dense layers on 2 pipeline stages with ``pipeline_config=config``, the layers set to ``segments``
    segments (virtual stages) per stage."""
    ms, nn = _ms(), _ms().nn
    from graphpar.models.mlp import DenseStack

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2, pipeline_config=config)
    net = DenseStack([np.ones((8, 8), np.float32)] * 4)
    for i, layer in enumerate(net.layers):
        layer.pipeline_segment, layer.pipeline_stage = divmod(i * 2 * segments // 4, 2)
    train = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4),
                                nn.SGD(net.trainable_params(), 0.1))
    return train(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))


def _pipeline_step(mistake: str):
    """MindSpore's functional pipeline step (``value_and_grad`` of a PipelineCell's loss, ``PipelineGradReducer``,
    ``optimizer(grads)`` under ``@ms.jit``, ``pipeline_stages=2``) with one mistake: "scaled" (``forward_fn``
    returns twice the PipelineCell's loss) or "no-pipeline-cell" (it differentiates the WithLossCell itself)."""
    ms, nn = _ms(), _ms().nn
    from graphpar.models.mlp import DenseStack

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2)
    net = DenseStack([np.ones((8, 8), np.float32)] * 2, stages=2)
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    net_with_loss = nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4)
    pp_grad_reducer = nn.PipelineGradReducer(optimizer.parameters)

    def forward_fn(x, y):
        return net_with_loss(x, y) * 2 if mistake == "scaled" else net_with_loss.network(x, y)

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

    @ms.jit
    def train_one_step(x, y):
        loss, grads = grad_fn(x, y)
        optimizer(pp_grad_reducer(grads))
        return loss

    return train_one_step(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))


def _prompt_attention_mask_split():
    """A PromptFlashAttention whose attn_mask's sequence entry differs from the query's, called in
    SEMI_AUTO_PARALLEL."""
    ms = _ms()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    pfa = _ops().PromptFlashAttention(2, input_layout="BNSD").shard(
        ((1, 2, 4, 1), (1, 2, 1, 1), (1, 2, 1, 1), (1, 1, 1, 1)))
    x = ms.Tensor(np.ones((1, 2, 16, 8), np.float32))

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.pfa = pfa

        def construct(self, q, mask):
            return self.pfa(q, q, q, mask)

    return Net()(x, ms.Tensor(np.zeros((1, 1, 16, 16), np.bool_)))


def _antiquant_split():
    """An IncreFlashAttention whose antiquant_scale entry splits its key/value rows, called in SEMI_AUTO_PARALLEL."""
    ms = _ms()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    ifa = _ops().IncreFlashAttention(4, input_layout="BNSD").shard(((2, 2, 1, 1),) * 4)

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.ifa = ifa

        def construct(self, q, kv, scale):
            return self.ifa(q, [kv], [kv], antiquant_scale=scale)

    x = ms.Tensor(np.ones((2, 4, 1, 4), np.float32))
    return Net()(x, ms.Tensor(np.ones((2, 4, 8, 4), np.float32)), ms.Tensor(np.ones((2, 4, 1, 4), np.float32)))


def _flash_attention_kv_split():
    """A FlashAttentionScore whose key/value sequence is split unlike the query's, called in SEMI_AUTO_PARALLEL."""
    ms = _ms()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    fa = _ops().FlashAttentionScore(2, input_layout="BNSD").shard(((1, 2, 4, 1), (1, 2, 2, 1), (1, 2, 2, 1)))
    x = ms.Tensor(np.ones((1, 2, 16, 16), np.float32))

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.fa = fa

        def construct(self, q):
            return self.fa(q, q, q)[3]

    return Net()(x)


def _interleaved_uneven():
    ms, nn = _ms(), _ms().nn
    net = nn.MicroBatchInterleaved(nn.WithLossCell(nn.Dense(8, 4), nn.MSELoss()), 3)
    return net(ms.Tensor(np.ones((32, 8), np.float32)), ms.Tensor(np.ones((32, 4), np.float32)))


def _manual_parallel(accumulate: bool = False):
    ms, nn, ops = _ms(), _ms().nn, _ms().ops

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(4, 2)
            self.all_reduce = ops.AllReduce()

        def construct(self, x):
            return self.all_reduce(self.dense(x))

    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    net = nn.WithLossCell(Net(), nn.MSELoss())
    wrapped = ms.parallel.nn.GradAccumulation(net, 2) if accumulate else net
    return nn.TrainOneStepCell(wrapped, nn.Momentum(net.trainable_params(), 0.1, 0.9))(
        ms.Tensor(np.ones((2, 4), np.float32)), ms.Tensor(np.ones((2, 2), np.float32)))


def _predict_layout_pynative():
    ms = _ms()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        return ms.Model(ms.nn.Dense(4, 2)).infer_predict_layout(ms.Tensor(np.ones((2, 4), np.float32)))
    finally:
        ms.set_context(mode=ms.GRAPH_MODE)


def _mnist_half_pair(tmp: Path):
    header = np.array([2051, 1, 28, 28], dtype=">u4").tobytes()
    (tmp / "train-images-idx3-ubyte").write_bytes(header + bytes(28 * 28))
    return _ds().MnistDataset(str(tmp))


def _export(tmp: Path, file_format: str, **kwargs):
    ms = _ms()
    return ms.export(ms.nn.Dense(2, 2), ms.Tensor(np.ones((1, 2), np.float32)), file_name=str(tmp / "net"),
                     file_format=file_format, **kwargs)


def _fft_split_transformed_dim():
    """FFT2 over dims (-2, -1) with dim -1 split, planned on 8 devices."""
    import graphpar as ms
    from graphpar import nn
    from graphpar.ops import auto_generate

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fft2 = auto_generate.FFT2().shard(((2, 1, 4),))

        def construct(self, x):
            return self.fft2(x, None, (-2, -1), None)

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    return ms.parallel.strategies(Net(), ms.Tensor(np.ones((8, 4, 4), np.complex64)))

def _mesh_conflict():
    """Mul split 3 x 8 feeding ReLU split 8 x 3, planned for 24 devices (none of which need exist)."""
    import graphpar as ms
    from graphpar import nn, ops

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.mul = ops.Mul().shard(((3, 8), (3, 8)))
            self.relu = ops.ReLU().shard(((8, 3),))

        def construct(self, x):
            return self.relu(self.mul(x, x))

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=24)
    return ms.parallel.strategies(Net(), ms.Tensor(np.ones((48, 48), np.float32)))


def _ascend_group():
    """A MatMul summing its contracted dimension over 3 neighbouring ranks of 24, for Ascend (MindSpore's HCCL rule)."""
    import graphpar as ms
    from graphpar import nn, ops

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.matmul = ops.MatMul().shard(((8, 3), (3, 1)))

        def construct(self, x, w):
            return self.matmul(x, w)

    ms.set_context(device_target="Ascend")
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=24)
    return ms.parallel.strategies(Net(), ms.Tensor(np.ones((48, 48), np.float32)), ms.Tensor(np.ones((48, 8),
                                                                                                      np.float32)))


def _batch_norm_group_size():
    """A training BatchNorm1d split 8 ways on N whose statistics are asked for in groups of 4 devices."""
    import graphpar as ms
    from graphpar import nn

    bn = nn.BatchNorm1d(8)
    bn.set_train()
    bn.bn_train.shard(((8, 1), (1,), (1,), (1,), (1,))).add_prim_attr("group_size", 4)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    return ms.parallel.strategies(bn, ms.Tensor(np.ones((16, 8), np.float32)))


ERR = "graphpar.errors:"


def _apply_stages_elsewhere():
    ms = _ms()
    from graphpar import nn
    from graphpar.models.mlp import mlp_data, search_mlp

    x, y = mlp_data(32, 16)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", auto_pipeline=True)
    try:
        summary = ms.parallel.plan_for_devices(nn.WithLossCell(search_mlp(8, 16), nn.MSELoss()), x, y, devices=8,
                                               platform="cpu")
    finally:
        ms.reset_auto_parallel_context()
    return summary.stages.apply(nn.WithLossCell(search_mlp(2, 16), nn.MSELoss()))


def _load_plan_without_pipeline(t):
    """A strategy file written by a plan without auto_pipeline: no searched pipeline in it."""
    ms = _ms()
    from graphpar import nn
    from graphpar.models.mlp import mlp_data, search_mlp

    x, y = mlp_data(16, 16)
    path = str(t / "plain.json")
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", strategy_ckpt_config={"save_file": path})
    try:
        net = nn.WithLossCell(search_mlp(2, 16), nn.MSELoss())
        nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.01, 0.9))(x, y)
    finally:
        ms.reset_auto_parallel_context()
    return ms.parallel.load_pipeline_plan(path)


_PROCESS_0 = {"GRAPHPAR_COORDINATOR": "127.0.0.1:1", "GRAPHPAR_NUM_PROCESSES": "2", "GRAPHPAR_PROCESS_ID": "0"}
ROWS: list[Row] = [
    # --- context settings -------------------------------------------------------------------------------------
    Row("context-mode", "context", "set_context(mode=5)", lambda t: _ms().set_context(mode=5),
        ERR + "ConfigError", ("mode=5", "GRAPH_MODE (0)")),
    Row("context-ascend", "context", "set_context(device_target='Ascend') in a multi-process job before init()",
        lambda t: _ms().set_context(device_target="Ascend"), ERR + "DeviceError",
        ("device_target='Ascend'", "no Ascend backend", "device_target='GPU', 'CPU' or 'TPU'"), _PROCESS_0),
    Row("context-target", "context", "set_context(device_target='NPU')",
        lambda t: _ms().set_context(device_target="NPU"), ERR + "ConfigError", ("device_target='NPU'", "'CPU'")),
    Row("context-save-graphs", "context", "set_context(save_graphs=7)", lambda t: _ms().set_context(save_graphs=7),
        ERR + "ConfigError", ("save_graphs=7", "valid choices")),
    Row("context-graphs-path", "context", "set_context(save_graphs_path='<a file>/dumps')",
        lambda t: (t / "f").write_text("x") and _ms().set_context(save_graphs_path=str(t / "f" / "dumps")),
        ERR + "ConfigError", ("save_graphs_path", "is a file, not a directory")),
    Row("context-device-id", "context", "set_context(device_id=99) on 8 devices",
        lambda t: _ms().set_context(device_id=99), ERR + "DeviceError", ("device_id=99", "valid device_id: 0..7")),
    Row("context-device-id-negative", "context", "set_context(device_id=-1)",
        lambda t: _ms().set_context(device_id=-1), ERR + "ConfigError", ("device_id must be an int >= 0",)),
    Row("context-unknown", "context", "set_context(enable_magic=True)",
        lambda t: _ms().set_context(enable_magic=True), ERR + "UnknownSettingError", ("'enable_magic'",)),
    Row("parallel-mode", "context", "set_auto_parallel_context(parallel_mode='magic')",
        lambda t: _ms().set_auto_parallel_context(parallel_mode="magic"), ERR + "ConfigError",
        ("parallel_mode='magic'", "semi_auto_parallel")),
    Row("parallel-search-mode", "context", "set_auto_parallel_context(search_mode='greedy')",
        lambda t: _ms().set_auto_parallel_context(search_mode="greedy"), ERR + "ConfigError",
        ("search_mode='greedy'", "sharding_propagation")),
    Row("parallel-device-num", "context", "set_auto_parallel_context(device_num=0)",
        lambda t: _ms().set_auto_parallel_context(device_num=0), ERR + "ConfigError", ("device_num must be an int >= 1",)),
    Row("parallel-device-num-too-many", "context", "set_auto_parallel_context(device_num=16) on 8 devices, then train",
        lambda t: _ms().set_auto_parallel_context(device_num=16, parallel_mode="data_parallel") or _train(),
        ERR + "DeviceError", ("device_num=16", "only 8", "valid: 1..8")),
    Row("parallel-dataset-strategy", "context", "set_auto_parallel_context(dataset_strategy=((0, 1),))",
        lambda t: _ms().set_auto_parallel_context(dataset_strategy=((0, 1),)), ERR + "ConfigError",
        ("dataset_strategy", "tuple of tuples of positive ints")),
    Row("parallel-gradients-mean", "context", "set_auto_parallel_context(gradients_mean='yes')",
        lambda t: _ms().set_auto_parallel_context(gradients_mean="yes"), ERR + "ConfigError",
        ("gradients_mean must be a bool",)),
    Row("parallel-propagation-order", "context", "set_auto_parallel_context(propagation_order='bfs')",
        lambda t: _ms().set_auto_parallel_context(propagation_order="bfs"), ERR + "ConfigError",
        ("propagation_order='bfs'", "hints_first", "mindspore")),
    Row("ps-enable-ps", "context", "set_ps_context(enable_ps=True)", lambda t: _ms().set_ps_context(enable_ps=True),
        ERR + "ConfigError", ("enable_ps", "no parameter-server mode")),
    Row("ps-ssl-no-config", "context", "set_ps_context(enable_ssl=True) without config_file_path",
        lambda t: _ms().set_ps_context(enable_ssl=True), ERR + "ConfigError", ("needs config_file_path",)),
    Row("ps-unknown", "context", "set_ps_context(scheduler_port=1)", lambda t: _ms().set_ps_context(scheduler_port=1),
        ERR + "UnknownSettingError", ("'scheduler_port'",)),
    Row("algo-unknown-key", "context", "set_algo_parameters(fully_use=True)",
        lambda t: _ms().set_algo_parameters(fully_use=True), ERR + "ConfigError",
        ("unknown key 'fully_use'", "'fully_use_devices'")),
    Row("algo-type", "context", "set_algo_parameters(elementwise_op_strategy_follow='yes')",
        lambda t: _ms().set_algo_parameters(elementwise_op_strategy_follow="yes"), ERR + "SettingTypeError",
        ("elementwise_op_strategy_follow must be a bool", "str")),
    Row("op-strategy-config-path", "context", "set_op_strategy_config(mode='SAVE', path='ops.json')",
        lambda t: _ms().set_op_strategy_config(mode="SAVE", path="ops.json"), KeyError,
        ("path='ops.json'", "must be absolute")),
    Row("context-compile-cache", "context", "set_context(enable_compile_cache='yes')",
        lambda t: _ms().set_context(enable_compile_cache="yes"), ERR + "ConfigError",
        ("enable_compile_cache must be a bool", "True, False")),
    Row("context-format-transform", "context", "set_context(format_transform='NHWC')",
        lambda t: _ms().set_context(format_transform="NHWC"), ERR + "ConfigError",
        ("format_transform", "'auto', 'channels_last', 'off'")),
    Row("pipeline-scheduler-seqpipe", "context", "set_auto_parallel_context(pipeline_config={'pipeline_scheduler': "
        "'seqpipe'})", lambda t: _ms().set_auto_parallel_context(pipeline_config={"pipeline_scheduler": "seqpipe"}),
        ERR + "ConfigError", ("'seqpipe'", "not built", "'zero_bubble_v'")),
    Row("pipeline-interleave-gpipe", "context", "set_auto_parallel_context(pipeline_config={'pipeline_interleave': "
        "True, 'pipeline_scheduler': 'gpipe'})", lambda t: _ms().set_auto_parallel_context(
            pipeline_config={"pipeline_interleave": True, "pipeline_scheduler": "gpipe"}),
        ERR + "ConfigError", ("interleaved", "pipeline_interleave=True with pipeline_scheduler '1f1b' or "
                              "'zero_bubble_v'")),
    Row("pipeline-zero-bubble-v-interleave", "context", "set_auto_parallel_context(pipeline_config="
        "{'pipeline_scheduler': 'zero_bubble_v'})", lambda t: _ms().set_auto_parallel_context(
            pipeline_config={"pipeline_scheduler": "zero_bubble_v"}),
        ERR + "ConfigError", ("zero_bubble_v", "needs pipeline_interleave=True")),
    Row("runtime-set-memory-size", "context", "runtime.set_memory(max_size='512MB')",
        lambda t: _ms().runtime.set_memory(max_size="512MB"), ERR + "ConfigError",
        ("set_memory()", "max_size must be a positive size in the format 'xxGB'")),
    Row("runtime-set-memory-level", "context", "runtime.set_memory(optimize_level='O2')",
        lambda t: _ms().runtime.set_memory(optimize_level="O2"), ERR + "ConfigError",
        ("optimize_level='O2'", "'O0', 'O1'")),
    Row("runtime-stream", "context", "runtime.Stream() (or Event, StreamCtx, current_stream, set_cur_stream, ...)",
        lambda t: _ms().runtime.Stream(), ERR + "RuntimeApiError",
        ("mindspore.runtime.Stream", "no user streams", "synchronize()")),
    Row("context-type-check", "context", "set_context(device_id='0')",
        lambda t: _ms().set_context(device_id="0"), ERR + "SettingTypeError", ("device_id must be int", "str")),
    Row("cost-model-unknown-key", "context", "_cost_model_context.set_cost_model_context(costmodel_delta=1.0)",
        lambda t: _cost_model().set_cost_model_context(costmodel_delta=1.0), ERR + "ConfigError",
        ("unknown key 'costmodel_delta'", "'costmodel_alpha'")),
    Row("cost-model-type", "context", "_cost_model_context.set_cost_model_context(costmodel_beta=400)",
        lambda t: _cost_model().set_cost_model_context(costmodel_beta=400), ERR + "SettingTypeError",
        ("costmodel_beta must be float", "int")),
    Row("cost-model-run-phase", "context", "_cost_model_context.set_cost_model_context(run_phase=2)",
        lambda t: _cost_model().set_cost_model_context(run_phase=2), ERR + "ConfigError",
        ("run_phase must be 0 (training) or 1 (inference)",)),
    Row("auto-parallel-context-not-kept", "context", "auto_parallel_context().get_force_fp32_communication()",
        lambda t: _apc().auto_parallel_context().get_force_fp32_communication(),
        "graphpar._context.parallel_view:NoSuchSettingError", ("force_fp32_communication", "keeps no")),
    # --- TLS files --------------------------------------------------------------------------------------------
    Row("tls-config-missing", "files", "set_ps_context(enable_ssl=True, config_file_path='missing.json')",
        lambda t: _ms().set_ps_context(enable_ssl=True, config_file_path=str(t / "missing.json")),
        "graphpar.communication.tls_config:TlsError", ("config_file_path", "missing.json", "cannot be read")),
    Row("tls-config-key", "files", "a TLS config with 'server_cert' instead of 'server_cert_path'",
        lambda t: _ms().set_ps_context(enable_ssl=True, config_file_path=_tls_config(t, server_cert="x.p12")),
        "graphpar.communication.tls_config:TlsError", ("unknown key(s) ['server_cert']", "server_cert_path")),
    Row("tls-password", "files", "set_ps_context(enable_ssl=True, ..., server_password='wrong')",
        lambda t: _ms().set_ps_context(enable_ssl=True, config_file_path=_tls_config(t), client_password="x",
                                       server_password="wrong"),
        "graphpar.communication.tls_config:TlsError", ("server_cert_path", "server.p12", "password is wrong")),
    Row("tls-ca-missing", "files", "a TLS config whose ca_cert_path does not exist",
        lambda t: _ms().set_ps_context(enable_ssl=True, config_file_path=_tls_config(t, ca_cert_path="no-ca.crt"),
                                       client_password="graphpar-test-pw", server_password="graphpar-test-pw"),
        "graphpar.communication.tls_config:TlsError", ("ca_cert_path", "no-ca.crt", "does not exist")),
    Row("tls-cipher-list", "files", "a TLS config with cipher_list 'NOT-A-CIPHER'",
        lambda t: _ms().set_ps_context(enable_ssl=True, config_file_path=_tls_config(t, cipher_list="NOT-A-CIPHER"),
                                       client_password="graphpar-test-pw", server_password="graphpar-test-pw"),
        "graphpar.communication.tls_config:TlsError", ("cipher_list 'NOT-A-CIPHER'",)),
    Row("tls-revoked", "files", "a worker whose client_cert_path certificate the CRL revokes",
        lambda t: _refused(t, "revoked"), "graphpar.communication.tls_config:TlsError",
        ("refused this worker's certificate client_cert_path", "revoked.p12", "CN=worker-revoked",
         "certificate revoked")),
    Row("tls-other-ca", "files", "a worker whose certificate another CA signed", lambda t: _refused(t, "other_ca"),
        "graphpar.communication.tls_config:TlsError", ("other_ca.p12", "unknown ca")),
    Row("tls-expired", "files", "a worker whose certificate expired", lambda t: _refused(t, "expired"),
        "graphpar.communication.tls_config:TlsError", ("expired.p12", "expired on", "certificate expired")),
    # --- environment variables --------------------------------------------------------------------------------
    Row("env-not-integer", "env", "GRAPHPAR_NUM_PROCESSES=two (set by hand)", lambda t: _plan("launch"),
        ERR + "EnvVarError", ("GRAPHPAR_NUM_PROCESSES='two'", "must be an integer"),
        {"GRAPHPAR_COORDINATOR": "127.0.0.1:1", "GRAPHPAR_NUM_PROCESSES": "two", "GRAPHPAR_PROCESS_ID": "0"}),
    Row("env-process-id-range", "env", "GRAPHPAR_PROCESS_ID=4 with GRAPHPAR_NUM_PROCESSES=4",
        lambda t: _plan("launch"), "graphpar.communication.errors:ClusterError",
        ("GRAPHPAR_PROCESS_ID=4 is out of range", "valid: 0..3"),
        {"GRAPHPAR_COORDINATOR": "127.0.0.1:1", "GRAPHPAR_NUM_PROCESSES": "4", "GRAPHPAR_PROCESS_ID": "4"}),
    Row("env-pserver", "env", "MS_ROLE=MS_PSERVER", _dynamic, "graphpar.communication.errors:ClusterError",
        ("MS_ROLE='MS_PSERVER'", "Parameter Server", "'MS_SCHED'"),
        {"MS_ROLE": "MS_PSERVER", "MS_SCHED_PORT": "1", "MS_WORKER_NUM": "2"}),
    Row("env-not-boolean", "env", "MS_ENABLE_RECOVERY=maybe (a word that is no switch)", lambda t: _roll_back(),
        ERR + "EnvVarError", ("MS_ENABLE_RECOVERY='maybe'", "must be a boolean", "0, false, no, off"),
        {"MS_ENABLE_RECOVERY": "maybe"}),
    Row("env-worker-num", "env", "MS_ROLE=MS_WORKER MS_WORKER_NUM=abc", lambda t: _plan("dynamic_cluster"),
        ERR + "EnvVarError", ("MS_WORKER_NUM='abc'", "must be an integer"),
        {"MS_ROLE": "MS_WORKER", "MS_SCHED_PORT": "1", "MS_WORKER_NUM": "abc"}),
    Row("env-rank-id-missing", "env", "RANK_SIZE=2 without RANK_ID", lambda t: _plan("rank_table"),
        "graphpar.communication.errors:ClusterError", ("RANK_ID is not", "msrun --worker_num 2"),
        {"RANK_SIZE": "2"}),
    Row("env-rank-id-range", "env", "RANK_SIZE=2 RANK_ID=2", lambda t: _plan("rank_table"),
        "graphpar.communication.errors:ClusterError", ("RANK_ID=2 is out of range", "valid: 0..1"),
        {"RANK_SIZE": "2", "RANK_ID": "2"}),
    Row("env-rank-table-servers", "env", "RANK_TABLE_FILE listing 2 servers, RANK_SIZE=16",
        lambda t: os.environ.update(RANK_TABLE_FILE=_rank_table(t, 2, 8)) or _plan("rank_table"),
        "graphpar.communication.errors:ClusterError", ("lists 2 servers", "msrun"),
        {"RANK_SIZE": "16", "RANK_ID": "0"}),
    Row("env-rank-table-size", "env", "RANK_TABLE_FILE with 8 devices, RANK_SIZE=2",
        lambda t: os.environ.update(RANK_TABLE_FILE=_rank_table(t, 1, 8)) or _plan("rank_table"),
        "graphpar.communication.errors:ClusterError", ("lists 8 devices but RANK_SIZE=2",),
        {"RANK_SIZE": "2", "RANK_ID": "0"}),
    Row("env-rank-table-json", "env", "RANK_TABLE_FILE that is not JSON",
        lambda t: (t / "rt.json").write_text("{oops") and os.environ.update(RANK_TABLE_FILE=str(t / "rt.json"))
        or _plan("rank_table"), "graphpar.communication.errors:ClusterError",
        ("RANK_TABLE_FILE=", "rt.json", "is not a MindSpore rank table"), {"RANK_SIZE": "2", "RANK_ID": "0"}),
    Row("env-coordinator", "env", "GRAPHPAR_COORDINATOR=localhost (no port)", lambda t: _plan("launch"),
        "graphpar.communication.errors:ClusterError", ("'localhost' is not HOST:PORT",),
        {"GRAPHPAR_COORDINATOR": "localhost", "GRAPHPAR_NUM_PROCESSES": "2", "GRAPHPAR_PROCESS_ID": "0"}),
    Row("env-rendezvous-loose", "env", "RANK_SIZE=2 RANK_ID=0 with $TMPDIR/graphpar-<uid> of mode 0755",
        _rendezvous_dir_loose, "graphpar.communication.errors:UnsafePathError",
        ("graphpar-", "has mode 0755", "lets other users in", "expected 0700")),
    Row("env-host-device-count", "env", "XLA_FLAGS=--xla_force_host_platform_device_count=abc, then "
        "set_context(device_target='CPU')", lambda t: _set_context_cpu(), ERR + "EnvVarError",
        ("XLA_FLAGS=", "--xla_force_host_platform_device_count=abc is no device count", "whole number >= 1"),
        {"XLA_FLAGS": "--xla_force_host_platform_device_count=abc"}),
    Row("env-host-device-count-zero", "env", "XLA_FLAGS=--xla_force_host_platform_device_count=0, then "
        "set_context(device_target='CPU')", lambda t: _set_context_cpu(), ERR + "EnvVarError",
        ("--xla_force_host_platform_device_count=0 is no device count", "whole number >= 1"),
        {"XLA_FLAGS": "--xla_force_host_platform_device_count=0"}),
    Row("env-cluster-timeout-zero", "env", "GRAPHPAR_CLUSTER_TIMEOUT=0", lambda t: _plan("launch"),
        ERR + "EnvVarError", ("GRAPHPAR_CLUSTER_TIMEOUT='0'", "out of range", ">= 1"),
        {"GRAPHPAR_COORDINATOR": "127.0.0.1:1", "GRAPHPAR_NUM_PROCESSES": "2", "GRAPHPAR_PROCESS_ID": "0",
         "GRAPHPAR_CLUSTER_TIMEOUT": "0"}),
    Row("env-heartbeat-timeout", "env", "GRAPHPAR_HEARTBEAT_TIMEOUT=-5", lambda t: _plan("launch"),
        ERR + "EnvVarError", ("GRAPHPAR_HEARTBEAT_TIMEOUT='-5'", "out of range", ">= 1"),
        {"GRAPHPAR_COORDINATOR": "127.0.0.1:1", "GRAPHPAR_NUM_PROCESSES": "2", "GRAPHPAR_PROCESS_ID": "0",
         "GRAPHPAR_HEARTBEAT_TIMEOUT": "-5"}),
    Row("env-sched-port", "env", "MS_ROLE=MS_WORKER MS_SCHED_PORT=99999", lambda t: _plan("dynamic_cluster"),
        ERR + "EnvVarError", ("MS_SCHED_PORT='99999'", "out of range", "1..65535"),
        {"MS_ROLE": "MS_WORKER", "MS_SCHED_PORT": "99999", "MS_WORKER_NUM": "2"}),
    Row("env-coordinator-busy", "env", "GRAPHPAR_COORDINATOR=127.0.0.1:PORT where PORT is taken (process 0)",
        lambda t: _while_port_busy(lambda port: _coordinator_of_process_0(f"127.0.0.1:{port}")),
        "graphpar.communication.errors:ClusterError", ("process 0 runs the job's coordinator", "is in use by another "
                                                       "process", "valid: a free port"), _PROCESS_0),
    Row("env-coordinator-not-local", "env", "GRAPHPAR_COORDINATOR=192.0.2.1:8118 in process 0, on another host",
        lambda t: _coordinator_of_process_0("192.0.2.1:8118"), "graphpar.communication.errors:ClusterError",
        ("192.0.2.1 is not an address of this machine", "valid: a free port on an address of process 0's host"),
        _PROCESS_0),
    Row("env-save-graphs", "env", "MS_DEV_SAVE_GRAPHS=yes", lambda t: _ms().get_context("save_graphs"),
        ERR + "EnvVarError", ("MS_DEV_SAVE_GRAPHS='yes'", "0 (off), 1, 2 or 3"), {"MS_DEV_SAVE_GRAPHS": "yes"}),
    Row("env-compile-cache", "env", "MS_COMPILER_CACHE_ENABLE=sometimes",
        lambda t: _ms().get_context("enable_compile_cache"), ERR + "EnvVarError",
        ("MS_COMPILER_CACHE_ENABLE='sometimes'", "must be a boolean"), {"MS_COMPILER_CACHE_ENABLE": "sometimes"}),
    Row("env-compile-cache-size", "env", "GRAPHPAR_COMPILE_CACHE_MAX_SIZE=lots",
        lambda t: _ms().get_context("enable_compile_cache"), ERR + "EnvVarError",
        ("GRAPHPAR_COMPILE_CACHE_MAX_SIZE='lots'", "must be a size on disk", "-1 for no bound"),
        {"GRAPHPAR_COMPILE_CACHE_MAX_SIZE": "lots"}),
    # --- command lines ----------------------------------------------------------------------------------------
    Row("cli-nproc", "cli", "graphpar launch --nproc 0 train.py", lambda t: _launch("--nproc", "0", "train.py"),
        "graphpar.launch.config:LaunchError", ("--nproc must be >= 1",)),
    Row("cli-disagree", "cli", "graphpar launch --nproc 2 --local_worker_num 3 train.py",
        lambda t: _launch("--nproc", "2", "--local_worker_num", "3", "train.py"), "graphpar.launch.config:LaunchError",
        ("--nproc 2 and --local_worker_num 3 disagree",)),
    Row("cli-no-command", "cli", "graphpar launch --nproc 2", lambda t: _launch("--nproc", "2"),
        "graphpar.launch.config:LaunchError", ("give the command to run",)),
    Row("cli-too-many-local", "cli", "graphpar launch --nproc 4 --worker_num 2 train.py",
        lambda t: _launch("--nproc", "4", "--worker_num", "2", "train.py"), "graphpar.launch.config:LaunchError",
        ("4 processes exceed --worker_num 2",)),
    Row("cli-node-rank", "cli", "graphpar launch --worker_num 4 --nproc 2 --node_rank 2 train.py",
        lambda t: _launch("--worker_num", "4", "--nproc", "2", "--node_rank", "2", "train.py"),
        "graphpar.launch.config:LaunchError", ("node 2", "valid node ranks: 0..1")),
    Row("cli-max-restarts", "cli", "graphpar launch --max-restarts -1 train.py",
        lambda t: _launch("--max-restarts", "-1", "train.py"), "graphpar.launch.config:LaunchError",
        ("--max-restarts must be >= 0",)),
    Row("cli-program", "cli", "graphpar launch no-such-program", lambda t: _launch("no-such-program"),
        "graphpar.launch.config:LaunchError", ("'no-such-program' is neither a program on PATH nor a file",)),
    Row("msrun-port", "cli", "msrun --master_port 80 train.py", lambda t: _msrun("--master_port", "80", "train.py"),
        "graphpar.launch.config:LaunchError", ("--master_port 80", "1024..65535")),
    Row("msrun-local", "cli", "msrun --worker_num 2 --local_worker_num 4 train.py",
        lambda t: _msrun("--worker_num", "2", "--local_worker_num", "4", "train.py"),
        "graphpar.launch.config:LaunchError", ("4 processes exceed --worker_num 2",)),
    Row("cli-master-port", "cli", "graphpar launch --master_port 70000 train.py",
        lambda t: _launch("--master_port", "70000", "train.py"), "graphpar.launch.config:LaunchError",
        ("--master_port 70000 is not a TCP port", "valid: 1..65535")),
    Row("cli-cluster-timeout", "cli", "graphpar launch --cluster_time_out 0 train.py",
        lambda t: _launch("--cluster_time_out", "0", "train.py"), "graphpar.launch.config:LaunchError",
        ("--cluster_time_out 0", "valid: seconds >= 1")),
    Row("cli-log-dir", "cli", "graphpar launch --log_dir /proc/x train.py",
        lambda t: _launch_started("--log_dir", "/proc/x", "train.py"), "graphpar.launch.config:LaunchError",
        ("--log_dir '/proc/x' cannot hold the workers' logs", "give a directory")),
    Row("cli-master-port-busy", "cli", "graphpar launch --nproc 2 --master_port PORT train.py, PORT taken",
        lambda t: _while_port_busy(lambda port: _launch_started("--nproc", "2", "--master_port", str(port),
                                                                "--log_dir", str(t), "train.py")),
        "graphpar.launch.config:LaunchError", ("process 0's coordinator listens at", "is in use by another process",
                                               "valid: a free port")),
    Row("cli-master-addr-not-local", "cli", "graphpar launch --nproc 2 --master_addr 192.0.2.1 train.py (node 0)",
        lambda t: _launch_started("--nproc", "2", "--master_addr", "192.0.2.1", "--master_port", "8118",
                                  "--log_dir", str(t), "train.py"), "graphpar.launch.config:LaunchError",
        ("192.0.2.1 is not an address of this machine", "valid: a free port on an address of this host")),
    Row("cli-heartbeat-timeout", "cli", "GRAPHPAR_HEARTBEAT_TIMEOUT=-5 graphpar launch --nproc 2 train.py",
        lambda t: _launch("--nproc", "2", "train.py"), "graphpar.launch.config:LaunchError",
        ("GRAPHPAR_HEARTBEAT_TIMEOUT='-5'", "out of range", ">= 1"), {"GRAPHPAR_HEARTBEAT_TIMEOUT": "-5"}),
    Row("cli-explore-port-busy", "cli", "graphpar ir explore ir_dumps --port PORT (or plan.explore(port=PORT)), PORT "
        "taken", lambda t: _while_port_busy(lambda port: _explorer_serve(port)),
        "graphpar.viz.explorer_server:ExplorerError", ("port", "is in use by another process", "valid: a free port")),
    # --- strategies (errors that exist on main) ---------------------------------------------------------------
    Row("shard-type", "strategy", "ops.MatMul().shard('abc')", lambda t: _ops().MatMul().shard("abc"),
        ERR + "StrategyTypeError", ("op 'MatMul'", "'abc'", "tuple of tuples")),
    Row("shard-zero", "strategy", "ops.MatMul().shard(((2, 0), (1, 1)))",
        lambda t: _ops().MatMul().shard(((2, 0), (1, 1))), ERR + "StrategyError", ("split 0", "positive int")),
    Row("shard-float", "strategy", "ops.MatMul().shard(((2.0, 1), (1, 1)))",
        lambda t: _ops().MatMul().shard(((2.0, 1), (1, 1))), ERR + "StrategyTypeError", ("2.0 (float)",)),
    Row("shard-arity", "strategy", "ops.MatMul().shard(((2, 1),))", lambda t: _ops().MatMul().shard(((2, 1),)),
        ERR + "StrategyError", ("2 tensor input(s) (x, y)", "has 1 entry")),
    Row("shard-rank", "strategy", "self.matmul.shard(((2, 1, 1), (1, 1))) on 2-D inputs, then train",
        lambda t: _train(in_strategy=((2, 1, 1), (1, 1))), ERR + "StrategyError",
        ("op 'matmul'", "(2, 1, 1)")),
    Row("shard-out-without-in", "strategy", "ops.MatMul().shard(None, ((8, 1),))",
        lambda t: _ops().MatMul().shard(None, ((8, 1),)), ERR + "StrategyError",
        ("an out_strategy needs an in_strategy", "or neither")),
    Row("set-device-target", "strategy", "ops.Gather().set_device('NPU')",
        lambda t: _ops().Gather().set_device("NPU"), ValueError, ("'NPU'", "'CPU', 'GPU', 'Ascend'")),
    Row("algo-fully-use-devices", "strategy", "set_algo_parameters(fully_use_devices=True), AUTO_PARALLEL, "
        "self.matmul.shard(((2, 1), (1, 1))) on 8 devices, then train", _fully_use_devices, ERR + "StrategyError",
        ("op 'matmul'", "fully_use_devices=True", "uses 2 of the 8 devices", "fully_use_devices=False")),
    Row("layout-alias", "strategy", "Layout((2, 4), ('dp', 'mp'))('dp', 'tp')",
        lambda t: _ms().Layout((2, 4), ("dp", "mp"))("dp", "tp"), ERR + "LayoutError",
        ("'tp'", "not an alias", "('dp', 'mp')")),
    Row("layout-alias-twice", "strategy", "Layout((2, 4), ('dp', 'mp'))('dp', 'dp')",
        lambda t: _ms().Layout((2, 4), ("dp", "mp"))("dp", "dp"), ERR + "LayoutError",
        ("alias 'dp' twice", "at most once per tensor")),
    Row("layout-devices", "strategy", "self.matmul.shard((layout('dp', 'mp'), layout('mp', 'None'))) with "
        "layout = Layout((2, 2), ('dp', 'mp')) on 8 devices, then train",
        lambda t: _train(in_strategy=(_ms().Layout((2, 2), ("dp", "mp"))("dp", "mp"),
                                      _ms().Layout((2, 2), ("dp", "mp"))("mp", "None"))), ERR + "StrategyError",
        ("op 'matmul'", "holds 4 devices but the job has 8", "product is 8")),
    Row("conv-split-spatial", "strategy", "Conv2D(8, 3, pad_mode='valid').shard(((1, 1, 1, 2), (1, 1, 1, 1))), "
        "then call it", lambda t: _conv_split_w(), ERR + "StrategyError",
        ("op 'conv2d'", "Conv2D cannot split W 2 ways", "pad_mode 'valid'", "larger than the stride",
         "Use 1 for H and W")),
    Row("strided-slice-ellipsis", "strategy", "StridedSlice(ellipsis_mask=4).shard(((8, 1, 1),))(x, (0, 0, 0), "
        "(8, 4, 0), (1, 1, 1))", lambda t: _one_op(_ops().StridedSlice(ellipsis_mask=4).shard(((8, 1, 1),)),
                                                   (0, 0, 0), (8, 4, 0), (1, 1, 1)), ERR + "StrategyError",
        ("op 'op'", "does not take ellipsis_mask (4)", "begin_mask/end_mask")),
    Row("tile-out-layout", "strategy", "Tile().shard((layout('None', 'None', 'None'),), (layout('dp', 'cp', "
        "'mp'),)) with Layout((1, 4, 2), ('dp', 'cp', 'mp')) on (8, 4, 16) tiled (2, 2, 2)",
        lambda t: _one_op(_ops().Tile().shard((_ms().Layout((1, 4, 2), ("dp", "cp", "mp"))("None", "None", "None"),),
                                              (_ms().Layout((1, 4, 2), ("dp", "cp", "mp"))("dp", "cp", "mp"),)),
                          (2, 2, 2)), ERR + "StrategyError",
        ("op 'op'", "Tile cannot split output dim 1 4 ways", "multiple 2", "divisor of 2")),
    Row("layer-norm-out-strategy", "strategy", "LayerNorm().shard(((8, 1), (1,), (1,)), ((8, 1), (8, 1), (8, 1))), "
        "then call it", lambda t: _layer_norm_out(), ERR + "StrategyError",
        ("op 'op'", "LayerNorm takes no out_strategy", "Drop the out_strategy")),
    Row("fft-transformed-dim", "strategy", "auto_generate.FFT2().shard(((2, 1, 4),)) transforming dims (-2, -1), "
        "then compile", lambda t: _fft_split_transformed_dim(), ERR + "StrategyError",
        ("op 'fft2'", "FFT2 cannot split input dim 2", "Use 1 for input dim 2")),
    Row("dct-type", "strategy", "auto_generate.DCT()(x, 3)",
        lambda t: _ops().auto_generate.DCT()(np.ones((4, 4), np.float32), 3), ValueError,
        ("DCT", "only type 2", "type=3")),
    Row("grid-sampler-bicubic", "strategy", "ops.GridSampler2D('bicubic')",
        lambda t: _ops().GridSampler2D("bicubic"), ValueError, ("GridSampler2D", "'bilinear' or 'nearest'",
                                                                "'bicubic' is not supported")),
    Row("mesh-conflict", "strategy", "Mul().shard(((3, 8), (3, 8))) feeding ReLU().shard(((8, 3),)) on "
        "device_num=24, then compile", lambda t: _mesh_conflict(), ERR + "MeshConflictError",
        ("'mul'", "'relu'", "cannot share one device mesh on 24 devices", "groupings 3 and 8 do not nest")),
    Row("add-pipeline-stage", "strategy", "Parameter(Tensor(np.ones(4)), 'w').add_pipeline_stage(-1)",
        lambda t: _ms().Parameter(_ms().Tensor(np.ones(4, np.float32)), "w").add_pipeline_stage(-1), TypeError,
        ("'w'", "add_pipeline_stage(-1)", "positive number of int type")),
    # --- MindSpore's MoE layer and its parallel config (graphpar.nn.transformer) -------------------------------
    Row("moe-expert-num", "strategy", "MoE(..., moe_config=MoEConfig(expert_num=6), parallel_config="
        "MoEParallelConfig(data_parallel=8, expert_parallel=4))", lambda t: _moe(6, (8, 1, 4)), ERR + "ConfigError",
        ("expert_num=6", "multiple of expert_parallel=4", "a divisor of 6")),
    Row("moe-data-parallel", "strategy", "MoE(..., parallel_config=MoEParallelConfig(data_parallel=2, "
        "expert_parallel=4))", lambda t: _moe(8, (2, 1, 4)), ERR + "ConfigError",
        ("data_parallel=2 must be a multiple of expert_parallel=4", "data_parallel=4, expert_parallel=4")),
    Row("moe-capacity-factor", "strategy", "MoEConfig(capacity_factor=0.5)",
        lambda t: _transformer().MoEConfig(capacity_factor=0.5), ERR + "ConfigError",
        ("MoEConfig()", "capacity_factor must be >= 1.0", "0.5")),
    Row("moe-experts-chosen", "strategy", "MoEConfig(expert_num=4, num_experts_chosen=5)",
        lambda t: _transformer().MoEConfig(expert_num=4, num_experts_chosen=5), ERR + "ConfigError",
        ("num_experts_chosen=5", "not be larger than expert_num=4")),
    Row("moe-group-wise-a2a", "strategy", "MoEConfig(group_wise_a2a=True)",
        lambda t: _transformer().MoEConfig(group_wise_a2a=True), ERR + "ConfigError",
        ("group_wise_a2a=True", "not built", "valid choices: False")),
    Row("moe-tokens", "strategy", "an MoE with data_parallel=4 called on 6 tokens",
        lambda t: _moe(3, (4, 1, 1))(np.ones((6, 8), np.float32)), ERR + "ConfigError",
        ("MoE()", "6 tokens", "data_parallel=4", "multiple of 4")),
    Row("transformer-config-pipeline", "strategy", "TransformerOpParallelConfig(pipeline_stage=2)",
        lambda t: _transformer().TransformerOpParallelConfig(pipeline_stage=2), ERR + "ConfigError",
        ("pipeline_stage=2", "Transformer layers", "valid: pipeline_stage=1", "set_auto_parallel_context")),
    Row("stages-apply-other-network", "strategy", "summary.stages.apply(other_net) with a stage plan made for an "
        "8-layer MLP (auto_pipeline=True) put on a 2-layer one", lambda t: _apply_stages_elsewhere(),
        "graphpar.compile.plans.stage_profile:StagePlanError",
        ("StageReport.apply(WithLossCell)", "no Cell at", "2-Dense", "the network it was made for")),
    Row("stages-file-no-pipeline", "strategy", "load_pipeline_plan(path) of a strategy file saved without "
        "auto_pipeline", _load_plan_without_pipeline, "graphpar.compile.plans.stage_profile:StagePlanError",
        ("load_pipeline_plan(", "records no searched pipeline", "auto_pipeline=True")),
    Row("flash-attention-kv-split", "strategy", "ops.FlashAttentionScore(2, input_layout='BNSD').shard(((1, 2, 4, 1), "
        "(1, 2, 2, 1), (1, 2, 2, 1))) as self.fa, then called", lambda t: _flash_attention_kv_split(),
        ERR + "StrategyError", ("op 'fa'", "split as the query's (4: ring attention", "Split dimension S")),
    Row("flash-attention-keep-prob", "strategy", "ops.FlashAttentionScore(2, keep_prob=1.5)",
        lambda t: _ops().FlashAttentionScore(2, keep_prob=1.5), ValueError,
        ("keep_prob=1.5", "valid: 0 < keep_prob <= 1")),
    Row("shard-batchnorm-group-size", "strategy", "BatchNorm's bn_train split 8 ways on N with "
        "add_prim_attr('group_size', 4), then plan", lambda t: _batch_norm_group_size(), ERR + "StrategyError",
        ("op 'bn_train'", "group_size 4", "4 of the 8 devices splitting N", "Give group_size 8")),
    Row("shard-padv3-paddings", "strategy", "ops.PadV3().shard(((2, 2, 2), (2,), ()))",
        lambda t: _ops().PadV3().shard(((2, 2, 2), (2,), ())), ERR + "StrategyError",
        ("op 'PadV3'", "paddings' entry (2,) must be all 1", "((2, 4, 1), (1,), ())")),
    Row("gathernd-index-depth", "strategy", "ops.GatherNd()(x of shape (4, 4), indices of shape (2, 3))",
        lambda t: _ops().GatherNd()(np.ones((4, 4), np.float32), np.zeros((2, 3), np.int32)), ValueError,
        ("GatherNd", "indices.shape[-1] (3)", "<= the rank of input_x (2)")),
    Row("infer-attention-quant-input", "strategy", "ops.IncreFlashAttention(4)(q, [k], [v], "
        "quant_scale2=scale)", lambda t: _ops().IncreFlashAttention(4, input_layout="BNSD")(
            np.ones((1, 4, 1, 8), np.float32), [np.ones((1, 4, 16, 8), np.float32)],
            [np.ones((1, 4, 16, 8), np.float32)], quant_scale2=np.ones((1,), np.float32)), ValueError,
        ("IncreFlashAttention", "quant_scale2", "not built", "pass None")),
    Row("infer-attention-quant-entries", "strategy", "ops.IncreFlashAttention(4).shard(((2, 1, 2),) * 9) (entries "
        "for the quantization inputs)", lambda t: _ops().IncreFlashAttention(4).shard(((2, 1, 2),) * 9),
        ERR + "StrategyError", ("9 entries", "quant_scale2", "not built", "one entry per given input")),
    Row("prompt-attention-mask-split", "strategy", "ops.PromptFlashAttention(2, input_layout='BNSD').shard(((1, 2, 4, "
        "1), (1, 2, 1, 1), (1, 2, 1, 1), (1, 1, 1, 1))) as self.pfa, called with an attn_mask",
        lambda t: _prompt_attention_mask_split(), ERR + "StrategyError",
        ("op 'pfa'", "attn_mask's sequence dimension is split 1", "must be 4", "Split attn_mask's dimension 2 by 4")),
    Row("fused-attention-key-entry", "strategy", "ops.auto_generate.FusedInferAttentionScore(4).shard(((2, 1, 2), "
        "(2, 1, 2), (2, 1, 2)))", lambda t: _ops().auto_generate.FusedInferAttentionScore(4).shard(((2, 1, 2),) * 3),
        ERR + "StrategyError", ("key entry (2, 1, 2)", "one entry per key tensor", "((2, 1, 4),)")),
    Row("infer-attention-antiquant-split", "strategy", "ops.IncreFlashAttention(4, input_layout='BNSD').shard(((2, 2, "
        "1, 1),) * 3 + ((2, 2, 1, 1),)) as self.ifa, called with antiquant_scale", lambda t: _antiquant_split(),
        ERR + "StrategyError", ("op 'ifa'", "antiquant_scale is split (2, 2, 1, 1)", "heads as the query's (2)",
                                "Give antiquant_scale (1, 2, 1, 1)")),
    Row("infer-attention-antiquant-shape", "strategy", "ops.IncreFlashAttention(4, input_layout='BNSD')(q, [k int8],"
        " [v int8], antiquant_scale of shape (2, 4, 1, 4) for 2 key/value heads)", lambda t: _ops().IncreFlashAttention(
            4, input_layout="BNSD", num_key_value_heads=2)(
            np.ones((1, 4, 1, 4), np.float16), [np.ones((1, 2, 8, 4), np.int8)], [np.ones((1, 2, 8, 4), np.int8)],
            antiquant_scale=np.ones((2, 4, 1, 4), np.float16)), ValueError,
        ("IncreFlashAttention", "antiquant_scale (2, 4, 1, 4)", "per tensor or per channel", "(2,) or (2, 2, 1, 4)")),
    Row("ascend-communication-group", "strategy", "set_context(device_target='Ascend'), then MatMul().shard(((8, 3), "
        "(3, 1))) on device_num=24, then compile", lambda t: _ascend_group(), ERR + "CommunicationGroupError",
        ("op 'matmul'", "forward reduction", "ranks [0, 1, 2]", "Ascend 910", "device_target='GPU' / 'CPU'")),
    Row("moe-expert-group-size", "strategy", "an MoE with MoEConfig(expert_group_size=2) and data_parallel=2 "
        "called on 6 tokens", lambda t: _transformer().MoE(8, 16, 0.0, moe_config=_transformer().MoEConfig(
            expert_num=3, expert_group_size=2), parallel_config=_transformer().MoEParallelConfig(2))(
            np.ones((6, 8), np.float32)), ERR + "ConfigError",
        ("MoE()", "6 tokens", "expert_group_size=2", "data_parallel=2", "dividing 3")),
    Row("nd-tp-matmul-layout", "strategy", "MatMul().shard((layout('None', ('y', 'x')), layout('x', 'y')))"
        ".add_prim_attr('enable_nd_tp', True) with Layout((2, 4), ('x', 'y')), then call it",
        lambda t: _nd_tp_matmul(), ERR + "StrategyError",
        ("op 'matmul'", "2D MatMul's last two dimensions", "(m, (x, y)) and (x, y)")),
    Row("shard-parameter-plan-split", "strategy", "cell.shard(in_strategy=((2, 1),), parameter_plan={'w': (1, 3)}) "
        "with w of shape (32, 16)", lambda t: _parameter_plan_split(), ERR + "StrategyError",
        ("param_shape[1]: 16 cannot be divisible by param_strategy[1]: 3", "divisor of 16")),
    # --- shapes and control flow in construct -----------------------------------------------------------------
    Row("construct-shape", "construct", "data of 16 features into a MatMul by an (8, 4) weight",
        lambda t: _train(in_dim=16), "graphpar.ir.construct_errors:OpShapeError",
        ("op 'matmul' (MatMul)", "_backbone-Net", "x[8, 16]", "y[8, 4]", "contracting dimensions")),
    Row("construct-control-flow", "construct", "`h * int(h.sum() > 0)` in construct", lambda t: _train("flow"),
        "graphpar.ir.construct_errors:ControlFlowError", ("Cell 'Net'", "_backbone-Net", "ops.Select", "jnp.where")),
    Row("construct-jnp-shape", "construct", "`h + jnp.ones((3,))` on a (8, 4) value in construct",
        lambda t: _train("jnp"), "graphpar.ir.construct_errors:OpShapeError", ("Cell 'Net'", "_backbone-Net", "shapes for broadcasting")),
    Row("initializer-negative", "construct", "initializer('normal', [-1, 16])",
        lambda t: __import__("graphpar").common.initializer.initializer("normal", [-1, 16]), ValueError,
        ("shape=[-1, 16]", "dimension 0 is -1", ">= 0")),
    Row("initializer-name", "construct", "initializer('gaussian', [4])",
        lambda t: __import__("graphpar").common.initializer.initializer("gaussian", [4]), ValueError,
        ("unknown initializer 'gaussian'", "normal")),
    Row("construct-asnumpy", "construct", "`x.asnumpy()` inside a jitted function or a GRAPH_MODE construct",
        lambda t: _asnumpy_in_jit(), ERR + "CellError",
        ("Tensor.asnumpy() inside a compiled program", "ops.Print()", "PYNATIVE_MODE")),
    Row("construct-micro-interleaved", "construct", "MicroBatchInterleaved(net, 3) on a batch of 32 rows",
        lambda t: _interleaved_uneven(), ERR + "CellError",
        ("MicroBatchInterleaved(interleave_num=3)", "input 0 has 32 rows", "divisible by 3")),
    Row("construct-grad-reducer-group", "construct", "nn.DistributedGradReducer(params, group='my_group')",
        lambda t: _ms().nn.DistributedGradReducer([], group="my_group"), ERR + "CellError",
        ("group='my_group'", "sub-group is not built", "world group")),
    Row("construct-predict-layout-pynative", "construct", "Model.infer_predict_layout(x) in PYNATIVE_MODE",
        lambda t: _predict_layout_pynative(), ERR + "CellError",
        ("infer_predict_layout", "PYNATIVE_MODE", "GRAPH_MODE")),
    Row("jit-two-gradients", "construct", "a @ms.jit step that calls its value_and_grad twice",
        lambda t: _jit_step("two-gradients"), ERR + "JitError",
        ("train_step", "2 gradients", "value_and_grad of 'forward_fn'", "differentiate it once")),
    Row("jit-no-optimizer", "construct", "a @ms.jit step that takes gradients and applies no optimizer",
        lambda t: _jit_step("no-optimizer"), ERR + "JitError", ("train_step", "calls no optimizer", "optimizer(grads)")),
    Row("jit-backend-ge", "construct", "@ms.jit(backend='GE')", lambda t: _ms().jit(backend="GE")(len), ERR + "JitError",
        ("backend='GE'", "XLA", "'ms_backend'")),
    Row("jit-auto-parallel-mode", "construct", "AutoParallel(train_step, parallel_mode='semi')",
        lambda t: __import__("graphpar.parallel", fromlist=["AutoParallel"]).AutoParallel(len, parallel_mode="semi"),
        ERR + "JitError", ("parallel_mode='semi'", "'semi_auto'", "'sharding_propagation'")),
    Row("jit-traced-value", "construct", "`loss * float(loss > 1.0)` in a @ms.jit step",
        lambda t: _jit_step("python-float"), ERR + "JitError",
        ("train_step", "Python control flow on a traced value", "catalogue.py:", "float(loss > 1.0)",
         "bool()/int()/float() of a Tensor", "ops.Select()(cond, a, b)")),
    Row("construct-predict-tuple-strategy-processes", "construct", "Model.predict(x) under dataset_strategy=((2, 1),) "
        "in a job of several processes", lambda t: _predict_tuple_strategy_multiprocess(), ERR + "ConfigError",
        ("Model.predict", "tuple dataset_strategy", "multi-process", "'data_parallel'", "'full_batch'")),
    Row("auto-parallel-not-built", "construct", "AutoParallel(train_step).print_local_norm()",
        lambda t: __import__("graphpar.parallel", fromlist=["AutoParallel"]).AutoParallel(len).print_local_norm(),
        ERR + "JitError", ("AutoParallel.print_local_norm", "not built", "ops.ReduceSum")),
    Row("auto-parallel-hsdp-args", "construct", "AutoParallel(train_step).hsdp(shard_size=0)",
        lambda t: __import__("graphpar.parallel", fromlist=["AutoParallel"]).AutoParallel(len).hsdp(shard_size=0),
        ERR + "ConfigError", ("AutoParallel.hsdp", "shard_size", "-1 or an int > 0")),
    Row("construct-manual-parallel-devices", "construct", "STAND_ALONE training of a network with ops.AllReduce in "
        "construct, in one process driving 8 devices", lambda t: _manual_parallel(),
        "graphpar.communication.errors:CommunicationError",
        ("WithLossCell", "_backbone.all_reduce", "one device", "drives 8", "msrun --worker_num 8",
         "parallel_mode=DATA_PARALLEL")),
    Row("construct-manual-parallel-accumulation", "construct", "GradAccumulation(net, 2) in STAND_ALONE training "
        "of a network with ops.AllReduce in construct", lambda t: _manual_parallel(accumulate=True),
        "graphpar.communication.errors:CommunicationError", ("GradAccumulation(micro_size=2)", "once per rank",
                                                             "micro_size=1")),
    Row("jit-traced-while", "construct", "`while loss > 1.0: ... return loss` in a @ms.jit step",
        lambda t: _jit_step("traced-while"), ERR + "TracedControlFlowError",
        ("catalogue.py:", "while loss > 1.0:", "whose body leaves the function with `return`",
         "`break` and `continue` are fine", "Assign the result in the body")),
    Row("jit-traced-if-return", "construct", "`if not amp.all_finite(grads): return loss` in a @ms.jit step",
        lambda t: _jit_step("if-return"), ERR + "TracedControlFlowError",
        ("catalogue.py:", "if not ms.amp.all_finite(grads):", "leaves the function with `return`",
         "Assign the result in both branches")),
    Row("jit-traced-if-one-branch", "construct", "a name bound in one branch of a traced `if` only, read after it",
        lambda t: _jit_step("one-branch"), ERR + "TracedControlFlowError",
        ("catalogue.py:", "if loss > 1.0:", "`note` is bound in the `if` branch only",
         "assign `note` before the `if`, or in both branches")),
    Row("jit-traced-if-shapes", "construct", "a traced `if` binding one name to Tensors of different shapes",
        lambda t: _jit_step("shapes"), ERR + "TracedControlFlowError",
        ("catalogue.py:", "`g` is float32[4, 8] after the `if` branch and float32[4] after the `else` branch",
         "same kind")),
    Row("jit-traced-while-shapes", "construct", "a traced `while` whose body gives a name another shape",
        lambda t: _jit_step("while-shapes"), ERR + "TracedControlFlowError",
        ("catalogue.py:", "while loss > 1.0:", "`loss` is float32[] before the loop and float32[4, 8] after its body",
         "one shape and dtype")),
    Row("jit-traced-while-new-name", "construct", "a name first bound in a traced `while`'s body, read after it",
        lambda t: _jit_step("while-new-name"), ERR + "TracedControlFlowError",
        ("catalogue.py:", "while loss > 1.0:", "`halved` is bound in the loop's body", "assign `halved` before")),
    Row("jit-traced-while-gradient", "construct", "a `while` on a value of the weights in the differentiated function",
        lambda t: _jit_step("while-gradient"), ERR + "TracedControlFlowError",
        ("catalogue.py:", "while out.sum() > 1.0:", "differentiated in reverse mode", "for i in range(n)")),
    Row("ops-div-rounding-mode", "construct", "ops.div(x, y, rounding_mode='round')",
        lambda t: _ops().div(np.ones(2), np.ones(2), rounding_mode="round"), ValueError,
        ("rounding_mode must be None, 'floor' or 'trunc'", "'round'")),
    Row("pipeline-zero-bubble-v-segments", "construct", "zero_bubble_v on Cells that set no pipeline_segment, then "
        "train", lambda t: _pipeline_segments({"pipeline_interleave": True, "pipeline_scheduler": "zero_bubble_v"}, 1),
        "graphpar.nn.pipeline_cell:PipelineError", ("'zero_bubble_v'", "2 segments", "use 1", "pipeline_segment=0")),
    Row("pipeline-segment-no-interleave", "construct", "layer.pipeline_segment = 1 without pipeline_interleave, "
        "then train", lambda t: _pipeline_segments({"pipeline_scheduler": "1f1b"}, 2),
        "graphpar.nn.pipeline_cell:PipelineError", ("'_backbone.layers.2'", "pipeline_segment=1", "pipeline_interleave=False")),
    Row("pipeline-functional-step-scaled", "construct", "`return net_with_loss(x, y) * 2` as the forward_fn of a "
        "@ms.jit pipeline step (pipeline_stages=2)", lambda t: _pipeline_step("scaled"),
        "graphpar.nn.pipeline_cell:PipelineError", ("step function 'train_one_step'", "value_and_grad of 'forward_fn'",
                                                     "other than PipelineCell's loss", "return net_with_loss(*inputs)")),
    Row("pipeline-functional-step-no-pipeline-cell", "construct", "a @ms.jit step differentiating a WithLossCell "
        "under pipeline_stages=2", lambda t: _pipeline_step("no-pipeline-cell"),
        "graphpar.nn.pipeline_cell:PipelineError", ("step function 'train_one_step'", "pipeline_stages=2",
                                                     "calls none", "nn.PipelineCell(nn.WithLossCell(net, loss_fn), "
                                                                   "micro_size)", "pipeline_stages=1")),
    Row("construct-grad-reducer-semi-auto", "construct", "nn.DistributedGradReducer(params) under "
        "parallel_mode='semi_auto_parallel' in GRAPH_MODE", lambda t: _grad_reducer_semi_auto(),
        ERR + "ParallelModeError", ("DistributedGradReducer", "'semi_auto_parallel'", "GRAPH_MODE", "PYNATIVE_MODE")),
    Row("construct-full-batch-data-parallel", "construct", "full_batch=True with parallel_mode='data_parallel', "
        "then call the network", lambda t: _full_batch_data_parallel(), ERR + "ParallelModeError",
        ("full_batch=True", "'data_parallel'", "'semi_auto_parallel' and 'auto_parallel' only")),
    Row("construct-allreduce-fusion-groups", "construct", "_cell_graph_executor._get_allreduce_fusion(train_net)",
        lambda t: _allreduce_fusion(), "graphpar.common.api:NoFusionGroupsError",
        ("_get_allreduce_fusion(Dense)", "no AllReduce fusion groups", "XLA's all-reduce combiner", "save_graphs")),
    Row("construct-get-next", "construct", "ops.GetNext([ms.float32, ms.int32], [[32, 64], [32]], 2, '')",
        lambda t: _ms().ops.operations.GetNext([np.float32, np.int32], [[32, 64], [32]], 2, ""),
        ERR + "UnsupportedOpError", ("GetNext", "device data queue", "construct(self, data, label)",
                                     "dataset_sink_mode=True", "[[32, 64], [32]]")),
    Row("construct-dynamic-shape", "construct", "Tensor(shape=[None, 64], dtype=ms.float32, init='normal')",
        lambda t: _ms().Tensor(shape=[None, 64], dtype=np.float32, init="normal"), ERR + "DynamicShapeError",
        ("[None, 64]", "initializer", "leave init out", "give the sizes")),
    Row("construct-set-inputs-mismatch", "construct", "net.set_inputs(Tensor(shape=[None, 16])); net(x of shape [4, "
        "8])", lambda t: _set_inputs_mismatch(), ERR + "InputSignatureError",
        ("Dense", "input 0", "[4, 8]", "[-1, 16]", "-1: any size")),
    Row("construct-dynamic-gather-axis", "construct", "Gather().shard(((8, 1), (1, 1))) on a table of shape [None, "
        "8], compiled", lambda t: _dynamic_gather_axis(), ERR + "DynamicStrategyError",
        ("'gather'", "[[8, 1], [1, 1]]", "gathered axis", "dynamic", "Keep that dimension whole")),
    Row("construct-dynamic-size-as-int", "construct", "if x.shape[0] > 8: in construct, x of shape [None, 16]",
        lambda t: _dynamic_size_branch(), ERR + "DynamicShapeError",
        ("Branches.construct", "every size", "'a0_0' > '8'", "no Python int")),
    Row("construct-symbol-split", "construct", "Mul().shard(((8, 1), (8, 1))) on x of shape [Symbol(divisor=2), 16], "
        "compiled", lambda t: _symbol_split(), ERR + "DynamicStrategyError",
        ("'mul'", "[[8, 1], [8, 1]]", "input 0's dimension 0", "multiple of 2", "split of 8", "divide")),
    Row("construct-symbol-call", "construct", "net.set_inputs(Tensor(shape=[Symbol(divisor=8), 16])); net(x of shape "
        "[12, 16])", lambda t: _symbol_call(), ERR + "InputSignatureError",
        ("Dense", "input 0's dimension 0", "size 12", "Symbol(divisor=8)", "8 * N + 0")),
    Row("construct-dynamic-multi-axis-layout", "construct", "GeLU().shard((layout(('dp', 'mp'), 'None'),)) on x of "
        "shape [16, None], compiled", lambda t: _dynamic_multi_axis_layout(), ERR + "DynamicStrategyError",
        ("'gelu'", "dimension 0 over several axes", "('dp', 'mp')", "dynamic shape", "one alias at most")),
    Row("construct-tensor-attribute-assigned", "construct", "`self.scale = self.scale * x.mean()` in construct, "
        "self.scale = Tensor(2.0) set in __init__", lambda t: _tensor_attribute_in_construct(), ERR + "CellError",
        ("Cell 'Scale' (block)", "'scale'", "not a Parameter", "constants of the compiled graph",
         "Parameter(Tensor(...), requires_grad=False)", "outside construct")),
    # --- datasets ---------------------------------------------------------------------------------------------
    Row("dataset-slices-lengths", "dataset", "NumpySlicesDataset({'x': 3 rows, 'y': 2 rows})",
        lambda t: _ds().NumpySlicesDataset({"x": np.zeros((3, 2)), "y": np.zeros(2)}), ERR + "DatasetError",
        ("different lengths", "'x': 3", "'y': 2")),
    Row("dataset-slices-scalar", "dataset", "NumpySlicesDataset(5)", lambda t: _ds().NumpySlicesDataset(5),
        ERR + "DatasetError", ("list, tuple, dict or numpy array", "int")),
    Row("dataset-columns", "dataset", "GeneratorDataset(rows) without column_names",
        lambda t: _ds().GeneratorDataset([(1,)]), ERR + "DatasetError", ("column_names is required",)),
    Row("dataset-batch", "dataset", "dataset.batch(0)", lambda t: _ds().NumpySlicesDataset([1, 2]).batch(0),
        ERR + "DatasetError", ("batch_size must be an int >= 1, got 0",)),
    Row("dataset-cifar-missing", "dataset", "Cifar10Dataset('/no/such/dir')",
        lambda t: _ds().Cifar10Dataset(str(t / "none")), ERR + "DatasetError", ("dataset_dir", "does not exist")),
    Row("dataset-cifar-truncated", "dataset", "Cifar10Dataset on a truncated data_batch_1.bin", _cifar_truncated,
        ERR + "DatasetError", ("data_batch_1.bin", "truncated")),
    Row("dataset-labels-out-of-range", "dataset", "labels 4, 9 and -1 into SoftmaxCrossEntropyWithLogits(sparse=True) "
        "on a 4-class head", _labels_out_of_range, ERR + "RuntimeCheckError",
        ("op 'one_hot' (OneHot)", "_loss_fn-SoftmaxCrossEntropyWithLogits", "[0, 4)", "from -1 to 9",
         "class indices 0..3")),
    Row("dataset-mnist-half-pair", "dataset", "MnistDataset(dir) on a directory with train-images-idx3-ubyte "
        "but no train-labels-idx1-ubyte", _mnist_half_pair, ERR + "DatasetError",
        ("holds train-images-idx3-ubyte but not train-labels-idx1-ubyte", "come in pairs")),
    Row("dataset-slice-patches", "dataset", "vision.SlicePatches(0, 2)",
        lambda t: _ds().vision.SlicePatches(0, 2), ERR + "DatasetError",
        ("SlicePatches", "num_height must be a positive int", "got 0")),
    Row("dataset-strategy-blocks-per-process", "dataset", "dataset_strategy=((2, 3),) on 3 processes of 2 devices "
        "(the second process's ranks 2 and 3 hold blocks (0, 2) and (1, 0))",
        lambda t: _assemble_blocks()([np.zeros((2, 2))] * 2, [2, 3], (2, 3), 6), ERR + "DatasetError",
        ("dataset_strategy entry 0 (2, 3)", "ranks [2, 3]", "do not form one box", "split the leading dimension")),
    # --- checkpoints ------------------------------------------------------------------------------------------
    Row("ckpt-missing", "checkpoint", "load_checkpoint('missing.ckpt')",
        lambda t: _ms().load_checkpoint(str(t / "missing.ckpt")), "graphpar.checkpoint.errors:CheckpointError",
        ("missing.ckpt", "no such checkpoint directory")),
    Row("ckpt-no-manifest", "checkpoint", "load_checkpoint of a save that never completed (no graphpar.json)",
        _no_manifest, "graphpar.checkpoint.errors:CheckpointError", ("net.ckpt", "graphpar.json")),
    Row("ckpt-damaged", "checkpoint", "load_checkpoint after a byte of a data file flipped", _flip_a_byte,
        "graphpar.checkpoint.errors:CheckpointError", ("net.ckpt", "checksum")),
    Row("ckpt-config", "checkpoint", "CheckpointConfig(save_checkpoint_steps=-1)",
        lambda t: __import__("graphpar.train", fromlist=["CheckpointConfig"]).CheckpointConfig(
            save_checkpoint_steps=-1), ValueError, ("save_checkpoint_steps=-1", "int >= 0")),
    Row("ckpt-prefix", "checkpoint", "ModelCheckpoint(prefix='a/b')",
        lambda t: __import__("graphpar.train", fromlist=["ModelCheckpoint"]).ModelCheckpoint(prefix="a/b"),
        ValueError, ("prefix='a/b'", "without '/'")),
    Row("ckpt-second-writer", "checkpoint", "a second job with the ModelCheckpoint directory and prefix of a live one",
        _second_writer, "graphpar.checkpoint.errors:CheckpointError",
        ("ckpt", "another live job", "prefix 'net'", "job job-A", "its own ModelCheckpoint(directory=...)")),
    Row("ckpt-directory-is-file", "checkpoint", "ModelCheckpoint(directory='notes.txt'), an existing file",
        lambda t: (t / "notes.txt").write_text("notes") and __import__("graphpar.train", fromlist=["ModelCheckpoint"])
        .ModelCheckpoint(directory=str(t / "notes.txt")), "graphpar.checkpoint.errors:CheckpointError",
        ("notes.txt", "is an existing file, not a directory", "Give a directory")),
    Row("ckpt-replace-file", "checkpoint", "save_checkpoint(net, 'model.ckpt') where model.ckpt is a MindSpore "
        "checkpoint file", lambda t: _save_over(t, "file"), "graphpar.checkpoint.errors:CheckpointError",
        ("model.ckpt", "is a file", "not a graphpar checkpoint", "another name")),
    Row("ckpt-replace-folder", "checkpoint", "save_checkpoint(net, 'model.ckpt') where model.ckpt is an unrelated "
        "folder", lambda t: _save_over(t, "folder"), "graphpar.checkpoint.errors:CheckpointError",
        ("model.ckpt", "not a graphpar checkpoint", "another name")),
    Row("ckpt-dir-unwritable", "checkpoint", "save_checkpoint(net, 'results/model.ckpt') where results is a file "
        "(or a folder made read-only)", lambda t: _save_over(t, "below-a-file"),
        "graphpar.checkpoint.errors:CheckpointError",
        ("results", "cannot write checkpoint model.ckpt", "not a directory", "writable directory")),
    Row("ckpt-rank-view-gone", "checkpoint", "load_checkpoint('rank_7/net.ckpt'), a rank's view of rank_0/net.ckpt, "
        "after rank_0 was removed", _view_of_a_removed_checkpoint, "graphpar.checkpoint.errors:CheckpointError",
        ("rank_7/net.ckpt", "view of rank 7", "rank_0/net.ckpt", "which is gone", "move rank_* folders together")),
    Row("strategy-file-malformed", "files", "a strategy file with \"parallel_layout_item\": null",
        lambda t: _strategy_file(t, '{"parallel_layout_item": null}'), ERR + "ConfigError",
        ("strategy.json", "malformed strategy file")),
    Row("strategy-file-json", "files", "strategy_ckpt_load_file that is not JSON",
        lambda t: _strategy_file(t, "{not json"), ERR + "ConfigError", ("strategy.json", "not a JSON strategy file")),
    Row("strategy-file-other-network", "files", "strategy_ckpt_load_file written for another network (no op or "
        "parameter name in common)", _strategy_of_another_network, ERR + "ConfigError",
        ("encoder_strategy.json", "none of its 2 entries", "'encoder.weight'", "'w'", "MatMul-matmul")),
    Row("tls-scheduler-other-ca", "files", "a Dynamic Cluster worker (set_ps_context(enable_ssl=True)) whose "
        "certificate another CA signed", lambda t: _scheduler_refuses(t, "other_ca", True),
        "graphpar.communication.tls_config:TlsError",
        ("Dynamic Cluster scheduler", "refused this worker's certificate", "other_ca.p12", "unknown ca")),
    Row("tls-scheduler-plain", "files", "set_ps_context(enable_ssl=True) in the workers but not in the scheduler's "
        "script", lambda t: _scheduler_refuses(t, "valid", False), "graphpar.communication.tls_config:TlsError",
        ("Dynamic Cluster scheduler", "runs without TLS", "set_ps_context(enable_ssl=True")),
    Row("strategy-save-file-folder", "files", "strategy_ckpt_config={'save_file': 'strategy.json'} where "
        "strategy.json is a folder", _strategy_save_file_folder, ERR + "ConfigError",
        ("strategy.json", "save_file is a directory", "path of a file")),
    Row("export-format", "files", "ms.export(net, x, file_name='net', file_format='ONNX')",
        lambda t: _export(t, "ONNX"), ERR + "ConfigError",
        ("file_format='ONNX' is not built", "jax.export artifact", "valid choices: 'MINDIR'")),
    Row("export-options", "files", "ms.export(net, x, file_name='net', file_format='MINDIR', enc_key=b'...')",
        lambda t: _export(t, "MINDIR", enc_key=b"0" * 16), ERR + "ConfigError",
        ("export options ['enc_key'] are not built", "file_format='MINDIR'")),
]


def _message(row: Row) -> str:
    """The message ``row`` produces now (run in a scratch directory, placement variables cleared)."""
    import re
    import tempfile

    saved = dict(os.environ)
    for name in list(os.environ):
        if re.match(r"^(GRAPHPAR_|MS_|OMPI_|PMIX_|SLURM_|RANK_)|^DEVICE_ID$", name):
            del os.environ[name]
    os.environ.update(row.env)
    try:
        row.run(Path(tempfile.mkdtemp()))
    except Exception as exc:  # noqa: BLE001 - the catalogue shows what each raises
        return f"{type(exc).__name__}: {exc}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
        import graphpar as ms

        ms.context.reset_context()
        ms.context.reset_auto_parallel_context()
        ms.set_ps_context(enable_ssl=False, config_file_path="", client_password="", server_password="")
    return "(no error)"


_LATE_REPORTS_NOTES = (
    "* A strategy `load_file` that partly matches the network: one warning names the entries it ignores (a file "
    "none of whose entries, or none of whose parameters, belongs to the network is the error "
    "`strategy-file-other-network`).",
    "* A check made when a step runs (`dataset-labels-out-of-range`) is raised lazily, without a host sync per "
    "step: at the next step's or call's dispatch, and at the latest at the end of the epoch (or of `Model.eval`); "
    "the steps dispatched meanwhile have run.",
    "* A graphpar error raised through a Cell call or `Model.train`/`eval`/`predict` shows the user's frames (the "
    "call, the `construct` line) under one graphpar frame; an exception that is not a graphpar error keeps every "
    "frame.",
)


def markdown() -> str:
    areas = {"context": "Context settings", "files": "Files (TLS configuration, strategy files)",
             "env": "Environment variables", "cli": "Command lines (graphpar launch, msrun)",
             "strategy": "Strategies (`shard()`)", "construct": "Shapes and control flow in `construct`, initializers",
             "dataset": "Datasets", "checkpoint": "Checkpoints"}
    out = ["# Bad inputs and the errors they give", "",
           "Every row is a mistake a user makes and the error graphpar raises for it, with its message as printed "
           "(paths from the test run). Each row is a test: `tests/errors/test_catalogue.py` checks the error class "
           "and that the message names the culprit and what would be valid; this page is generated from the same "
           "table (`python -m tests.errors.catalogue > docs/errors.md`). Every graphpar error subclasses "
           "`graphpar.errors.GraphparError` and the builtin a Python user would expect (`ValueError`, `TypeError`, "
           "`RuntimeError`).", ""]
    for area, title in areas.items():
        out += [f"## {title}", "", "| id | mistake | error | message |", "| --- | --- | --- | --- |"]
        for row in (r for r in ROWS if r.area == area):
            text = _message(row).replace("|", "\\|").replace("\n", " ")
            name = row.error_class().__name__
            out.append(f"| `{row.id}` | {row.mistake.replace('|', chr(92) + '|')} | `{name}` | {text} |")
        out.append("")
    out += ["## Settings refused or reported rather than ignored", "",
            "* An environment variable of a launch convention the process does not use, set to a non-integer "
            "(`MS_WORKER_NUM=abc` under `graphpar launch`): ignored with one line saying so; where the variable "
            "applies it is the error `env-not-integer` / `env-worker-num` above.",
            "* `graphpar launch` with placement variables of another convention in its environment: one line at "
            "start says they are not passed to the workers.",
            "* `set_auto_parallel_context(device_num=4)` on 8 devices: one line names the devices used "
            "(`cpu:0-3`).",
            "* `set_ps_context(config_file_path=...)` with `enable_ssl=False`: one line says the file is not used.",
            "* `runtime.set_memory` with a pool shape other than MindSpore's defaults (`init_size`, `increase_size`, "
            "`huge_page_reserve_size`, `optimize_level='O1'`), `runtime.dispatch_threads_num`, "
            "`runtime.set_kernel_launch_group`, `runtime.launch_blocking`, `runtime.empty_cache`: one line each says "
            "what XLA does instead (`porting_from_mindspore.md`, \"mindspore.runtime\").",
            "* A rollback that cannot use the newest checkpoint names the save that was in flight "
            "(`checkpoints.md` §8).",
            "* A rollback (or `resume=True`) names every checkpoint it passes over: a damaged one (the file and its "
            "fault, or a damaged manifest) and, for a restart, the checkpoints of other runs (`checkpoints.md` "
            "§7, §8).",
            "* A fresh `ModelCheckpoint` run in a directory with checkpoints of its prefix says it writes under "
            "`{prefix}_N`; a lock left by a dead job is taken over with one line (`checkpoints.md` §3).",
            "* A line to the Dynamic Cluster scheduler that is not a valid message (not JSON, an unknown op or field, "
            "a field of the wrong type, over 64 KiB) is refused by name, the refusal sent back and logged, and the "
            "scheduler serves on; a connection that does not register within 10 s is closed with one line.",
            "* A connection to a worker's TLS forwarder from another process than the worker itself: closed, one line "
            "names its pid (`distributed.md` §7).",
            "* A worker of `graphpar launch` that ends its script cleanly while the others still run after "
            "`--early-exit-grace` (default 60 s, `GRAPHPAR_EARLY_EXIT_GRACE`): the launcher stops the job with one "
            "line naming it (`worker 1, process 1, pid N, left the job early: ...`, its exit status, its log), the "
            "other workers' ends listed as consequences (`distributed.md` §2).",
            *_LATE_REPORTS_NOTES,
            "* `FusedInferAttentionScore` with `add_prim_attr(\"enable_ring_attention\", True)` and a strategy: one "
            "line says the key/value sequence is split as the query's and XLA's partitioner gathers the blocks (no "
            "ring of send/receives as MindSpore builds); the result is the same.",
            "* `FusedInferAttentionScore` with a one-token query and `actual_seq_lengths`: one line says it is unused "
            "(as in MindSpore; `actual_seq_lengths_kv` gives the cache lengths).",
            "* `IncreFlashAttention` / `FusedInferAttentionScore` with `antiquant_scale` / `antiquant_offset` and a "
            "float key/value: one line says they are unused (MindSpore's kernel dequantizes an int8 cache only).", ""]
    return "\n".join(out)


if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    print(markdown())
