"""The lowering plan (issue 21 item 6): pins, call groups, shared calls and recomputed runs worked out in one pass,
once per planned graph, and a small interpreter that binds its units."""

import gc

import jax
import jax.numpy as jnp
import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.lowering import call_groups, plan
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.interpret import run
from graphpar.compile.lowering.network_state import current_state
from graphpar.compile.lowering.pins import Step
from graphpar.models.mlp import DeepFFN
from tests.bigmodels.nets import data


def _train(net, mode="semi_auto_parallel"):
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=mode)
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))


def test_the_plan_is_made_once_per_planned_graph(monkeypatch):
    made = []
    original = plan.plan_lowering

    def counting(graph, *args):
        made.append(graph)
        return original(graph, *args)

    monkeypatch.setattr(plan, "plan_lowering", counting)
    x, y = data(16, 32, 32)
    train = _train(DeepFFN(32, 4))
    train.program.lower_step([x, y])
    train.program.lower_step([x, y])  # a second lowering of the same planned graph: the same plan
    train(ms.Tensor(x), ms.Tensor(y))
    graph = train.program.plan_graph([x, y])
    assert made == [graph]
    key = next(iter(plan._plans[id(graph)]))
    assert plan.lowering_plan(graph, *key) is plan.lowering_plan(graph, *key)


def test_units_are_every_node_once_in_order_with_recomputed_runs():
    x, y = data(16, 32, 32)
    graph = _train(DeepFFN(32, 4, recompute=True)).program.plan_graph([x, y])
    lowering = plan.plan_lowering(graph)
    ids = []
    for unit in lowering.units:
        steps = unit.steps if isinstance(unit, (call_groups.Group, plan.Checkpointed)) else [unit]
        ids.extend(s.node.id for s in steps)
    assert ids == graph.order
    checkpointed = [u for u in lowering.units if isinstance(u, plan.Checkpointed)]
    assert len(checkpointed) == 4  # one per recomputed block
    for unit in checkpointed:
        members = {s.node.id for s in unit.steps}
        made = {v for s in unit.steps for v in s.outputs}
        reads = {v for s in unit.steps for v in s.inputs}
        assert set(unit.inputs) == reads - made - {v for v, _ in unit.consts}
        later = {v for n in graph.node_list() if n.id not in members for v in n.inputs} | set(graph.outputs)
        assert set(unit.outputs) == made & later and unit.outputs
    # a plain node is a shared call exactly when the table has its body key
    assert all(isinstance(s, Step) for s in lowering.calls.values())


def test_the_plan_goes_with_its_graph():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(4, 4, activation="relu")

        def construct(self, x):
            return self.fc(x)

    ms.set_context(mode=ms.GRAPH_MODE)
    net = Net()
    ns = current_state(None, net, net.trainable_params())
    graph = trace_network(ns, [jax.ShapeDtypeStruct((2, 4), jnp.float32)], "forward")[0]
    lowering = plan.lowering_plan(graph)
    x = np.ones((2, 4), np.float32)
    out = run(lowering, ns.params.values() + ns.rest.values() + [x])[0]
    np.testing.assert_allclose(np.asarray(out), np.asarray(net(ms.Tensor(x))), rtol=1e-6)
    key = id(graph)
    assert key in plan._plans
    del graph
    gc.collect()
    assert key not in plan._plans  # the plan holds the graph's nodes, not the graph
