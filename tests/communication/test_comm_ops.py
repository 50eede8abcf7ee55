"""Collective ops on 8 CPU devices, checked against numpy: a top-level GRAPH_MODE call runs construct once per rank,
sub-groups, MindSpore's gradients (under run_per_rank and inside DATA_PARALLEL training) and the errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.communication import create_group, management
from graphpar.communication.errors import CommunicationError
from graphpar.compile.runtime import spmd_call
from graphpar.compile.runtime.spmd_call import run_per_rank

N = 8


@pytest.fixture(autouse=True)
def _no_groups():
    management._groups.clear()
    yield
    management._groups.clear()


class Wrap(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x):
        return self.op(x)


def per_rank(x):
    """Rank r's rows of process-local data split over the 8 local devices."""
    return np.split(np.asarray(x), N)


def test_nccl_allgather_seed_prints_one_row_per_rank():
    out = Wrap(ops.AllGather())(np.arange(N, dtype=np.float32).reshape(N, 1))
    assert out.shape == (N, 1)  # replicated on every rank: returned once
    np.testing.assert_array_equal(np.asarray(out), np.arange(N).reshape(N, 1))
    assert str(np.asarray(out)).startswith("[[0.]\n [1.]")


def test_a_cells_per_rank_calls_trace_once_per_signature():
    net = Wrap(ops.AllGather())
    for _ in range(2):
        net(np.arange(N, dtype=np.float32).reshape(N, 1))
    net(np.arange(2 * N, dtype=np.float32).reshape(N, 2))
    assert spmd_call._programs[net].counts.traces == 2


@pytest.mark.parametrize("op,reduce", [(ops.ReduceOp.SUM, np.sum), (ops.ReduceOp.MAX, np.max),
                                       (ops.ReduceOp.MIN, np.min), (ops.ReduceOp.PROD, np.prod)])
def test_all_reduce_world(op, reduce):
    x = np.random.default_rng(0).uniform(0.5, 1.5, size=(N * 2, 3)).astype(np.float32)
    out = Wrap(ops.AllReduce(op))(x)
    expected = reduce(np.stack(per_rank(x)), axis=0)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5)


def test_all_reduce_on_a_group_reduces_within_each_block():
    create_group("g0", [0, 1, 2, 3])
    x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    out = np.asarray(Wrap(ops.AllReduce(group="g0"))(x)).reshape(N, 2)
    np.testing.assert_array_equal(out[:4], np.broadcast_to(x[:4].sum(0), (4, 2)))
    np.testing.assert_array_equal(out[4:], np.broadcast_to(x[4:].sum(0), (4, 2)))  # the complement block


def test_registered_groups_partition_the_ranks():
    for i in range(4):
        create_group(f"g{i}", [i, i + 4])
    x = np.arange(N, dtype=np.float32).reshape(N, 1)
    out = np.asarray(Wrap(ops.AllGather(group="g0"))(x)).reshape(N, 2)
    for r in range(N):
        np.testing.assert_array_equal(out[r], [r % 4, r % 4 + 4])


def test_uneven_group_is_refused_with_the_group_name():
    create_group("odd", [0, 1, 2])
    with pytest.raises(CommunicationError, match="group='odd'.*cannot"):
        Wrap(ops.AllReduce(group="odd"))(np.ones((N, 1), np.float32))


def test_reduce_scatter_sum_and_max():
    x = np.random.default_rng(1).normal(size=(N * N, 2)).astype(np.float32)
    parts = np.stack(per_rank(x))  # (rank, 8, 2)
    for op, reduce in ((ops.ReduceOp.SUM, np.sum), (ops.ReduceOp.MAX, np.max)):
        out = np.asarray(Wrap(ops.ReduceScatter(op))(x))
        np.testing.assert_allclose(out, reduce(parts, axis=0), rtol=1e-5)  # rank r keeps row r


def test_reduce_scatter_group():
    create_group("pairs", [0, 1])
    x = np.arange(N * 2, dtype=np.float32).reshape(N * 2, 1)
    out = np.asarray(Wrap(ops.ReduceScatter(group="pairs"))(x)).reshape(N)
    parts = np.stack(per_rank(x))[..., 0]  # (rank, 2)
    expected = [parts[(r // 2) * 2:(r // 2) * 2 + 2].sum(0)[r % 2] for r in range(N)]
    np.testing.assert_array_equal(out, expected)


def test_broadcast_world_and_group():
    x = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    (out,) = Wrap(ops.Broadcast(3))(x)
    np.testing.assert_array_equal(np.asarray(out), x[3:4])
    create_group("hi", [4, 5, 6, 7])
    (out,) = Wrap(ops.Broadcast(5, group="hi"))((x,))
    out = np.asarray(out)
    np.testing.assert_array_equal(out[4:], np.broadcast_to(x[5], (4, 2)))
    np.testing.assert_array_equal(out[:4], np.broadcast_to(x[1], (4, 2)))  # root's position in the other block


def test_all_to_all_world_and_group():
    x = np.arange(N * N * 3, dtype=np.float32).reshape(N * N, 3)
    out = np.asarray(Wrap(ops.AlltoAll(N, 0, 1))(x))  # per rank: (8, 3) -> (1, 24)
    parts = per_rank(x)
    for r in range(N):
        expected = np.concatenate([parts[j][r:r + 1] for j in range(N)], axis=1)
        np.testing.assert_array_equal(out[r:r + 1], expected)
    create_group("quad", [0, 1, 2, 3])
    x = np.arange(N * 4 * 2, dtype=np.float32).reshape(N * 4, 2)
    out = np.asarray(Wrap(ops.AlltoAll(4, 0, 0, group="quad"))(x)).reshape(N, 4, 2)
    parts = per_rank(x)
    for r in range(N):
        block = range(0, 4) if r < 4 else range(4, 8)
        expected = np.concatenate([parts[j][r % 4:r % 4 + 1] for j in block])
        np.testing.assert_array_equal(out[r], expected)


def test_outputs_that_vary_come_back_per_rank():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.allreduce = ops.AllReduce()

        def construct(self, x):
            total = self.allreduce(x)
            return total, x - total, jnp.sum(x)

    total, diff, scalar = Net()(np.arange(N, dtype=np.float32).reshape(N, 1))
    assert total.shape == (1, 1) and diff.shape == (N, 1) and scalar.shape == (N,)
    np.testing.assert_array_equal(np.asarray(diff)[:, 0], np.arange(N) - 28)


def test_compiled_once_per_signature(monkeypatch):
    net = Wrap(ops.AllReduce())
    calls = []
    real = jax.shard_map
    monkeypatch.setattr(jax, "shard_map", lambda *a, **k: calls.append(1) or real(*a, **k))
    net(np.ones((N, 1), np.float32))
    net(np.zeros((N, 1), np.float32))
    net(np.ones((N * 2, 1), np.float32))
    assert len(calls) == 2
    assert spmd_call.needs_spmd(net) and not spmd_call.needs_spmd(nn.Dense(2, 2))


def test_parameters_are_read_at_each_call():
    class Scaled(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.ones((1,), np.float32)), name="w")
            self.allreduce = ops.AllReduce()

        def construct(self, x):
            return self.allreduce(x * self.w)

    net = Scaled()
    x = np.ones((N, 1), np.float32)
    assert float(np.asarray(net(x)).ravel()[0]) == N
    net.w.set_data(ms.Tensor(np.full((1,), 2.0, np.float32)))
    assert float(np.asarray(net(x)).ravel()[0]) == 2 * N


def test_local_rows_must_split_over_local_devices():
    with pytest.raises(CommunicationError, match="divisible by 8"):
        Wrap(ops.AllGather())(np.ones((3, 1), np.float32))


def test_ops_outside_a_per_rank_run_explain_where_they_work():
    with pytest.raises(CommunicationError, match="per rank.*DATA_PARALLEL.*run_per_rank"):
        ops.AllReduce()(jnp.ones((2,)))


def test_op_argument_checks():
    with pytest.raises(CommunicationError, match="ReduceOp.SUM"):
        ops.AllReduce("mean")
    with pytest.raises(CommunicationError, match="root_rank"):
        ops.Broadcast(-1)
    with pytest.raises(CommunicationError, match="split_count=4 must equal the group size 8"):
        Wrap(ops.AlltoAll(4, 0, 0))(np.ones((N * 8, 1), np.float32))


# --- gradients: MindSpore's bprops ----------------------------------------------------------------------------
def _grad(op, x, post=lambda y: y):
    return np.asarray(run_per_rank(lambda v: jax.grad(lambda u: jnp.sum(post(op(u)) ** 2))(v), x))


def test_gradients_follow_mindspore_bprops():
    x = np.arange(1, N * 2 + 1, dtype=np.float32).reshape(N, 2)
    s = x.sum(0)
    # AllReduce SUM: dx = AllReduce(dout) = 8 * 2 * sum (replicated, so returned once)
    np.testing.assert_allclose(_grad(ops.AllReduce(), x).reshape(-1, 2)[0], N * 2 * s)
    # AllReduce MAX: dx = AllReduce(dout) * (x == out): only rank 7 holds the max
    g = _grad(ops.AllReduce(ops.ReduceOp.MAX), x).reshape(N, 2)
    np.testing.assert_allclose(g[-1], N * 2 * x[-1])
    np.testing.assert_array_equal(g[:-1], 0)
    # AllReduce PROD: dx = AllReduce(dout * out) / x
    g = _grad(ops.AllReduce(ops.ReduceOp.PROD), x / 4).reshape(N, 2)
    np.testing.assert_allclose(g, N * 2 * (np.prod(x / 4, 0) ** 2) / (x / 4), rtol=1e-4)
    # AllGather: dx = ReduceScatter(dout) = 8 * 2 * x
    np.testing.assert_allclose(_grad(ops.AllGather(), x), N * 2 * x)
    # Broadcast: dx = dout, each rank its own
    g = _grad(lambda u: ops.Broadcast(0)(u)[0], x)
    np.testing.assert_allclose(g.reshape(-1, 2)[0], 2 * x[0])
    # AlltoAll: dx = AlltoAll(swapped)(dout): per rank, x -> pieces; sum(out^2) gradient is 2 * x
    y = np.arange(N * N, dtype=np.float32).reshape(N * N, 1)
    np.testing.assert_allclose(_grad(ops.AlltoAll(N, 0, 1), y), 2 * y)
    # ReduceScatter SUM: dx = AllGather(dout), the same on every rank (so returned once)
    g = _grad(ops.ReduceScatter(), y)
    rs = np.stack(per_rank(y)).sum(0)  # rank r's output is rs[r]
    np.testing.assert_allclose(g, 2 * rs)


def test_reduce_scatter_max_has_no_gradient_as_in_mindspore():
    with pytest.raises(CommunicationError, match="SUM only"):
        _grad(ops.ReduceScatter(ops.ReduceOp.MAX), np.ones((N * N, 1), np.float32))


def test_data_parallel_training_through_an_all_reduce_matches_numpy():
    """A loss that AllReduces inside DATA_PARALLEL: the per-device loss sees the global mean, and gradients follow
    the AllReduce bprop (here identical to differentiating the summed per-device losses)."""
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(np.array([0.5], np.float32)), name="w")
            self.allreduce = ops.AllReduce()

        def construct(self, x):
            return jnp.mean((self.allreduce(x * self.w) - 1.0) ** 2)

    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=False)
    net = Net()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
    step = nn.TrainOneStepCell(net, opt)
    x = np.arange(1, N + 1, dtype=np.float32).reshape(N, 1)
    loss = float(np.asarray(step(x)))
    s = x.sum()
    np.testing.assert_allclose(loss, (0.5 * s - 1.0) ** 2, rtol=1e-5)
    # each device's loss depends on w through the global sum; gradients_mean=False sums the N identical ones
    grad = N * 2 * (0.5 * s - 1.0) * s
    np.testing.assert_allclose(net.w.asnumpy(), [0.5 - 0.01 * grad], rtol=1e-5)
