"""The first step compiles the step alone, nothing per parameter shape and no optimizer ``init``: a parameter drawn
eagerly (on one device) reaches its planned layout from the host, with no program (JAX's own route, a jitted
``_multi_slice`` per shape, cost the GPT bench model seven compiles, 0.3 s of its 1.5 s first step)."""

import jax
import jax.numpy as jnp
import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.runtime.placement import host_constants, initial_state
from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell
from tests.init.compiles import compiled_names


def test_first_gpt_step_in_semi_auto_compiles_no_helper_per_parameter_shape():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    train = gpt_train_cell(GPT(layers=2))
    ids, labels = gpt_data()
    with compiled_names() as names:
        loss = float(train(ids, labels))
    assert np.isfinite(loss)
    # the step alone: the optimizer state (zeros, counts) is made on the host and copied to its shardings
    assert names == ["step"], names
    params = train.network.trainable_params()
    split = [p for p in params if not p.get_value().sharding.is_fully_replicated]
    assert len({p.shape for p in split}) >= 4  # several split shapes, each placed without a program


def test_eager_initializers_compile_per_size_bucket_not_per_shape():
    """Building layers of six shapes draws them with at most one program: a draw's elements depend only on their
    position, so every size up to 1024 shares one padded draw."""
    ms.set_seed(0)
    with compiled_names() as names:
        nets = [nn.Dense(a, b) for a, b in ((30, 20), (20, 10), (10, 5))]
    assert len(nets) == 3 and set(names) <= {"draw_values"} and len(names) <= 1, names


def test_adam_state_is_made_on_the_host_in_the_parameters_shardings():
    """Adam's count and moments are constants: the first step compiles the step alone, and each moment lies where
    its parameter lies, zero."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = GPT(layers=1)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Adam(net.trainable_params(), 1e-3))
    ids, labels = gpt_data()
    placed = train.program.place_inputs([ids, labels])
    with compiled_names() as names:
        stages = train.program.stages(placed)  # compiles the step and makes the optimizer state, without running it
    assert names == ["step"], names
    state, wanted = train.optimizer.opt_state, stages.compiled.in_shardings[2]
    assert jax.tree.leaves(jax.tree.map(lambda x, s: x.sharding == s, state, wanted)) == [True] * len(
        jax.tree.leaves(state))
    moments = [x for x in jax.tree.leaves(state) if x.ndim >= 1]
    assert moments and all(not np.any(np.asarray(x)) for x in moments)
    assert any(not x.sharding.is_fully_replicated for x in moments)
    assert np.isfinite(float(train(*placed)))


def test_an_init_that_reads_the_parameters_runs_as_one_program():
    """Only constants are made on the host: an ``init`` whose state depends on the parameters' values (a copy of
    them, as a slow-weights optimizer keeps) runs as one jitted program, with the same values."""
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    shardings = jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(jax.devices()[0]), params)

    def zeros(p):
        return jax.tree.map(jnp.zeros_like, p), jnp.int32(0)

    def copy(p):
        return jax.tree.map(lambda x: 2 * x, p)

    closed, shapes = jax.make_jaxpr(zeros, return_shape=True)(params)
    assert [np.shape(v) for v in host_constants(closed)] == [(3,), (2, 3), ()]
    closed, shapes = jax.make_jaxpr(copy, return_shape=True)(params)
    assert host_constants(closed) is None
    with compiled_names() as names:
        state = initial_state(copy, params, closed, shapes, shardings)
    assert names == ["copy"]
    np.testing.assert_array_equal(state["w"], 2 * np.arange(6.0).reshape(2, 3))


def test_state_moves_to_its_shardings_in_one_batched_transfer(monkeypatch):
    """Parameters made eagerly (on one device) reach their split and replicated shardings through one batched
    ``jax.device_put`` (JAX's per-call work paid once, not per parameter), with their values; one already in place
    is kept as it is."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from graphpar.compile.runtime.placement import place_state

    mesh = Mesh(np.asarray(jax.devices()[:8]), ("d",))
    split, replicated = NamedSharding(mesh, P("d")), NamedSharding(mesh, P())
    placed = jax.device_put(jnp.ones(8), replicated)
    values = [jnp.arange(16.0).reshape(8, 2), jnp.arange(4.0), placed]
    calls = []
    device_put = jax.device_put
    monkeypatch.setattr(jax, "device_put", lambda *a, **k: calls.append(a) or device_put(*a, **k))
    out = place_state(values, [split, replicated, replicated])
    assert len(calls) == 1
    assert [o.sharding for o in out] == [split, replicated, replicated] and out[2] is placed
    for o, v in zip(out, values):
        np.testing.assert_array_equal(np.asarray(o), np.asarray(v))
