"""Cheap tracing and lowering (issue 11 item 5): op calls traced inline give the graph that staging every call as a
``jit`` gives; calls that cannot be delimited inline are staged; lowering binds plain primitives and leaves out the
pins implied by elementwise neighbours, with the numbers of one device."""

import jax
import jax.numpy as jnp
import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.compile.graph_trace import trace_network
from graphpar.compile.interpret import implied_outputs
from graphpar.compile.state import current_state


class Mlp(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16, activation="relu")
        self.fc2 = nn.Dense(16, 4)
        self.fc1.matmul.shard(((2, 1), (4, 1)))
        self.add = ops.Add()
        self.reshape = ops.Reshape()

    def construct(self, x):
        y = self.fc2(self.fc1(x))
        return self.add(self.reshape(y, (8, 4)), y)  # Add(x, x)-like repeated input; same-shape Reshape


class InsideVmap(nn.Cell):
    def __init__(self):
        super().__init__()
        self.relu = ops.ReLU()
        self.mul = ops.Mul()

    def construct(self, x):
        return self.mul(jax.vmap(self.relu)(x), x)


class InsideScan(nn.Cell):
    def __init__(self):
        super().__init__()
        self.relu = ops.ReLU()
        self.add = ops.Add()

    def construct(self, x):
        y, _ = jax.lax.scan(lambda c, _: (self.relu(c), None), x, None, length=2)
        return self.add(y, x)


def _graphs(net):
    ns = current_state(None, net, net.trainable_params())
    avals = [jax.ShapeDtypeStruct((8, 8 if isinstance(net, Mlp) else 4), jnp.float32)]
    return trace_network(ns, avals, "forward")[0], trace_network(ns, avals, "forward", staged=True)[0]


def test_inline_trace_gives_the_staged_graph_and_delimits_each_op():
    ms.set_context(mode=ms.GRAPH_MODE)
    inline, staged = _graphs(Mlp())
    assert inline.as_text() == staged.as_text()
    kinds = [(n.kind, n.instance_name, n.scope) for n in inline.node_list()]
    assert kinds == [(n.kind, n.instance_name, n.scope) for n in staged.node_list()]
    assert [n.hint for n in inline.node_list()] == [n.hint for n in staged.node_list()]
    by_name = {n.instance_name: n for n in inline.node_list()}
    # a traced-inline op carries its equations; the same-shape Reshape returns its input and is staged as a jit
    assert by_name["matmul"].body is not None and by_name["matmul"].eqn is None
    assert by_name["reshape"].body is None and by_name["reshape"].eqn.params["name"].startswith("graphpar_op_")
    # the graph's jaxpr has the function's own results only, and no per-op call equations
    assert len(inline.closed_jaxpr.jaxpr.outvars) == len(inline.outputs)
    assert sum(e.primitive.name in ("jit", "pjit") for e in inline.closed_jaxpr.jaxpr.eqns) == 1  # the Reshape


def test_ops_inside_transformations_are_staged_and_keep_their_nodes():
    ms.set_context(mode=ms.GRAPH_MODE)
    for net, inner in ((InsideVmap(), "relu"), (InsideScan(), None)):
        inline, staged = _graphs(net)
        assert inline.as_text() == staged.as_text()
        assert all(n.body is None for n in inline.node_list())
        if inner:
            assert [n.instance_name for n in inline.node_list() if n.is_op][0] == inner
        x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
        expected = x * np.maximum(x, 0) if inner else np.maximum(x, 0) + x
        np.testing.assert_allclose(np.asarray(net(ms.Tensor(x))), expected, rtol=1e-6)


def test_lowering_leaves_out_implied_pins_and_matches_one_device():
    x = np.random.RandomState(0).randn(8, 8).astype(np.float32)
    y = np.random.RandomState(1).randn(8, 4).astype(np.float32)
    losses, initial = {}, {}
    for mode in ("stand_alone", "semi_auto_parallel"):
        ms.reset_auto_parallel_context()
        ms.set_context(mode=ms.GRAPH_MODE)
        ms.set_auto_parallel_context(parallel_mode=mode)
        net = Mlp()
        for p in net.trainable_params():  # both runs start from the same weights
            initial.setdefault(p.name, p.asnumpy())
            p.set_data(ms.Tensor(initial[p.name]))
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        losses[mode] = [float(train(ms.Tensor(x), ms.Tensor(y))) for _ in range(3)]
        if mode == "semi_auto_parallel":
            graph = train.program.plan_graph([x, y])
            implied = implied_outputs(graph)
            bias_add = [n for n in graph.node_list() if n.kind == "BiasAdd" and "fc1" in n.scope]
            relu = [n for n in graph.node_list() if n.kind == "ReLU"]
            # fc1's bias add feeds only the ReLU, in its layout: its pin is implied; the ReLU feeds a matmul: pinned
            assert bias_add and bias_add[0].outputs[0] in implied
            assert relu and relu[0].outputs[0] not in implied
            assert all(graph.values[v].producer is not None for v in implied)
            text = train.program.lower_step([x, y]).as_text()
            assert "graphpar_op_" not in text  # op bodies are inlined: no call per op in the lowered program
    np.testing.assert_allclose(losses["semi_auto_parallel"], losses["stand_alone"], rtol=1e-5)
