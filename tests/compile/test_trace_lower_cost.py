"""Cheap tracing and lowering (issue 11 item 5): op calls traced inline give the graph that staging every call as a
``jit`` gives; calls that cannot be delimited inline are staged; lowering binds plain primitives and leaves out the
pins implied by elementwise neighbours, with the numbers of one device; repeated bodies and repeated chain-like runs
of nodes are lowered as one shared ``jit`` each (keyed by structure, custom derivative rules included) with the
collectives, attribution and numbers of the inline lowering."""

import collections
import re

import jax
import jax.numpy as jnp
import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.pins import implied_outputs
from graphpar.compile.lowering.network_state import current_state


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


def _keys(fn, *avals):
    from graphpar.compile.lowering.bodies import BodyKeys

    jaxpr = jax.make_jaxpr(fn)(*avals).jaxpr
    return BodyKeys().eqns(jaxpr.invars, jaxpr.eqns, jaxpr.outvars)


def _scaled_grad(scale):
    """A custom_jvp whose primal does not show its rule: identity forward, tangent times ``scale``."""
    f = jax.custom_jvp(lambda x: x)
    f.defjvp(lambda primals, tangents: (primals[0], tangents[0] * scale))
    return f


def test_body_keys_equal_exactly_when_the_bodies_compute_the_same_function():
    x = jax.ShapeDtypeStruct((4, 8), jnp.float32)
    y = jax.ShapeDtypeStruct((8, 4), jnp.float32)
    assert _keys(jax.nn.relu, x) == _keys(jax.nn.relu, x)  # a custom_jvp: its primal and its JVP compared
    assert _keys(jax.nn.relu, x) != _keys(jax.nn.relu, jax.ShapeDtypeStruct((4, 4), jnp.float32))
    assert _keys(lambda a: a * 2.0, x) != _keys(lambda a: a * 3.0, x)  # literals by value
    assert _keys(lambda a, b: a @ b, x, y) != _keys(lambda a, b: (a @ b).T, x, y)
    assert _keys(lambda a, b: a - b, x, x) != _keys(lambda a, b: b - a, x, x)  # operand order
    # the same primal, different derivative rules (closures at one source line): never the same body
    assert _keys(_scaled_grad(2.0), x) != _keys(_scaled_grad(3.0), x)
    assert _keys(_scaled_grad(2.0), x) == _keys(_scaled_grad(2.0), x)


def _gpt_run(monkeypatch, share: str):
    from graphpar.compile.lowering import call_groups
    from graphpar.compile.lowering import plan
    from graphpar.dump.hlo import parse_collectives
    from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell

    if share != "groups":  # "nodes": shared node bodies only; "inline": every node inline
        monkeypatch.setattr(call_groups, "plan_units", lambda graph, segments: [list(s) for s in segments])
    if share == "inline":
        monkeypatch.setattr(plan, "shared_calls", lambda steps: {})
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    train = gpt_train_cell(GPT(layers=2))
    inputs = list(gpt_data())
    lowered = train.program.lower_step(inputs)
    compiled_text = lowered.compile().as_text()
    parsed = parse_collectives(compiled_text, 8)
    collectives = sorted((c.kind, str(c.shapes), str(c.groups), str(c.nodes), c.pin, c.backward) for c in parsed)
    in_groups = sum("jit(graphpar_group)" in c.op_name for c in parsed)
    losses = [float(train(*inputs)) for _ in range(2)]
    monkeypatch.undo()
    return (train.program.plan_graph(inputs), lowered.as_text(), (collectives, in_groups, _instructions(compiled_text)),
            losses)


def _instructions(hlo: str) -> collections.Counter:
    """The compiled program's instructions without names and metadata (XLA names them after op names)."""
    hlo = re.sub(r", metadata=\{[^}]*\}|, stack_frame_id=\d+", "", hlo)
    hlo = re.sub(r"(calls|to_apply|condition|body)=[\w.\-]+", r"\1=X", re.sub(r"%[\w.\-]+", "%X", hlo))
    hlo = re.sub(r"[\w.\-]+: ", "p: ", re.sub(r"^\s*(ROOT\s+)?[\w.\-]+ = ", r"\1X = ", hlo, flags=re.M))
    return collections.Counter(line.strip() for line in hlo.splitlines()
                               if "=" in line and not re.match(r"^\s*\d+ ", line))


def test_repeated_bodies_lower_once_with_the_same_collectives_and_numbers(monkeypatch):
    graph, text, (collectives, in_groups, program), losses = _gpt_run(monkeypatch, "groups")
    _, _, (_, _, node_program), node_losses = _gpt_run(monkeypatch, "nodes")
    _, plain_text, (plain_collectives, _, _), plain_losses = _gpt_run(monkeypatch, "inline")
    # both blocks' ops are the same bodies with the same pins: one shared call per repeated chain of nodes (a
    # Linear's matmul and bias add, ...) or repeated node, not one per node
    assert "@graphpar_group" in text and "@graphpar_node" in text and "@graphpar_" not in plain_text
    groups, nodes = text.count("call @graphpar_group"), text.count("call @graphpar_node")
    assert groups >= 2 * 6 and groups + nodes < len(graph.order), (groups, nodes, len(graph.order))
    assert text.count("func.func private @graphpar_group") <= groups / 2
    # the partitioner sees the same layouts: the same collectives, attributed to the same nodes and pins (those
    # inside a group call by the call's first node id plus the member's offset)
    assert collectives == plain_collectives and any(c[4] for c in collectives) and in_groups > 0
    assert losses == plain_losses == node_losses
    # groups change no instruction of the program XLA compiles (calls and inline bodies may differ in layouts)
    assert program == node_program


def test_groups_are_repeated_chain_like_runs():
    from graphpar.compile.lowering import call_groups
    from graphpar.compile.lowering.plan import plan_lowering
    from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    graph = gpt_train_cell(GPT(layers=3)).program.plan_graph(list(gpt_data()))
    units = plan_lowering(graph).units
    groups = [u for u in units if isinstance(u, call_groups.Group)]
    # every node once, in graph order
    assert [s.node.id for u in units for s in (u.steps if isinstance(u, call_groups.Group) else [u])] == graph.order
    by_key: dict = {}
    for g in groups:
        by_key.setdefault(g.share, []).append(g)
        members = {s.node.id for s in g.steps}
        reads = [v for s in g.steps for v in s.node.inputs]
        assert len(reads) == len(set(reads)), g.scope  # nothing read twice inside: no cotangent summed inside
        made = {v for s in g.steps for v in s.node.outputs}
        for v in made & set(reads):  # read inside: never read after
            assert v not in graph.outputs and all(n in members for n, _ in graph.values[v].consumers)
        assert set(g.outputs) <= made and set(g.inputs) == set(reads) - made
    assert all(len(gs) >= 2 for gs in by_key.values())  # a group's function is shared
    # each block is a few chains (query, key, value-attention up to the causal mask, from the mask's Add to the
    # projection and residual, feed-forward), not ~30 nodes: the mask is a constant of the block (a Tensor
    # attribute), and a node reading a constant is never a shared call, so the attention chain is cut there
    assert len(groups) == 3 * 5 and len(units) < len(graph.order) / 3, (len(groups), len(units), len(graph.order))


def test_low_precision_runs_stay_per_node_calls():
    """Runs touching bfloat16 values are not grouped: XLA's CPU compile of a grouped call rounds bfloat16
    differently from the per-node program (measured on ResNet-18 at O3), and the per-node program is the one that
    equals hand-written JAX casts bit for bit. The same network in float32 is grouped."""
    from graphpar.compile.lowering import call_groups
    from graphpar.compile.lowering.plan import plan_lowering
    from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell

    def groups(low_precision: bool) -> list:
        ms.reset_auto_parallel_context()
        ms.set_context(mode=ms.GRAPH_MODE)
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
        net = GPT(layers=2)
        if low_precision:
            net.to_float(ms.bfloat16)
        graph = gpt_train_cell(net).program.plan_graph(list(gpt_data()))
        return [u for u in plan_lowering(graph).units if isinstance(u, call_groups.Group)]

    assert len(groups(False)) == 2 * 5  # five chains a block (test_groups_are_repeated_chain_like_runs)
    assert groups(True) == []
