"""Exactness: on graphs of <= 30 op nodes the search's plan is the cost model's optimum over the same candidate
sets, found here independently by brute force (every combination, for the small MLP) and by exact min-sum variable
elimination (the 1-layer transformer, whose product of candidate counts is far beyond enumeration)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.models.mlp import mlp_data, search_mlp
from graphpar.planner.cost import HARDWARE, grad_values, plan_cost
from graphpar.planner.passes.context import PlanContext, PlanRequest
from graphpar.planner.search.ilp import solve_ilp
from graphpar.planner.search.problem import build_problem, combined_gradient_messages
from graphpar.planner.search.settings import SEARCH_MODES, objective_hardware


def _hw(search_mode):
    """The objective the search of ``search_mode`` minimises on this machine's platform (the tests run on CPU)."""
    return objective_hardware(search_mode, HARDWARE["cpu"])


class TinyTransformer(nn.Cell):
    """One pre-norm block, MindSpore style (2-D activations, heads by Reshape + Transpose), 26 op nodes with the
    loss."""

    def __init__(self, batch=4, seq=8, hidden=32, heads=4):
        super().__init__()
        rng = np.random.default_rng(0)
        self.batch, self.seq, self.hidden, self.heads = batch, seq, hidden, heads

        def w(*shape):
            return Parameter(Tensor((rng.normal(size=shape) * 0.1).astype(np.float32)))

        self.wq, self.wk, self.wv, self.wo = w(hidden, hidden), w(hidden, hidden), w(hidden, hidden), w(hidden, hidden)
        self.w1, self.w2 = w(4 * hidden, hidden), w(hidden, 4 * hidden)
        self.mm_q, self.mm_k, self.mm_v, self.mm_o, self.mm_1, self.mm_2 = (ops.MatMul(transpose_b=True)
                                                                          for _ in range(6))
        self.reshape = ops.Reshape()
        self.tq, self.tk, self.tv, self.merge = ops.Transpose(), ops.Transpose(), ops.Transpose(), ops.Transpose()
        self.score, self.context = ops.BatchMatMul(), ops.BatchMatMul()
        self.softmax, self.gelu, self.add1, self.add2 = ops.Softmax(), ops.GeLU(), ops.Add(), ops.Add()

    def construct(self, x):
        b, s, h, n = self.batch, self.seq, self.hidden, self.heads
        q = self.tq(self.reshape(self.mm_q(x, self.wq), (b, s, n, h // n)), (0, 2, 1, 3))
        k = self.tk(self.reshape(self.mm_k(x, self.wk), (b, s, n, h // n)), (0, 2, 3, 1))
        v = self.tv(self.reshape(self.mm_v(x, self.wv), (b, s, n, h // n)), (0, 2, 1, 3))
        ctx = self.context(self.softmax(self.score(q, k)), v)
        ctx = self.reshape(self.merge(ctx, (0, 2, 1, 3)), (b * s, h))
        x = self.add1(x, self.mm_o(ctx, self.wo))
        return self.add2(x, self.mm_2(self.gelu(self.mm_1(x, self.w1)), self.w2))


def _problem(net, inputs, search_mode, devices=8):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode=search_mode, device_num=devices)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    planned = train.program.plan_graph(list(inputs))
    mesh = planned.plan.mesh
    ctx = PlanContext(mesh, PlanRequest(mesh.n_devices, "auto_parallel", search_mode),
                      {v: planned.plan.value_specs[v] for v in planned.inputs if planned.values[v].kind == "input"})
    fresh = planned.with_annotations({n.id: {"strategy": None, "provenance": None} for n in planned.node_list()})
    return planned, build_problem(fresh, ctx, _hw(search_mode))


def _factors(problem):
    unary = [problem.unary_time(g) for g in range(len(problem.variables))]
    pair = [((e.u, e.v), e.cost[np.ix_(e.u_class, e.v_class)]) for e in problem.edges]
    return unary, pair


def _brute_force(problem):
    """Every combination of candidates: the cost tensor by broadcasting (one slice per choice of the first
    variable, to bound memory), its minimum and the set of combinations that reach it."""
    unary, pair = _factors(problem)
    sizes = [len(u) for u in unary]
    slices = []
    for first in range(sizes[0]):
        total = np.full(sizes[1:], unary[0][first])
        for g, u in enumerate(unary[1:], start=1):
            total = total + u.reshape([-1 if k == g else 1 for k in range(1, len(sizes))])
        for (a, b), m in pair:
            m = m if a < b else m.T
            a, b = min(a, b), max(a, b)
            if a == 0:
                total = total + m[first].reshape([-1 if k == b else 1 for k in range(1, len(sizes))])
                continue
            shape = [1] * (len(sizes) - 1)
            shape[a - 1], shape[b - 1] = sizes[a], sizes[b]
            total = total + m.reshape(shape)
        slices.append(total)
    best = min(float(t.min()) for t in slices)
    argmins = {(first,) + tuple(ix) for first, t in enumerate(slices)
               for ix in np.argwhere(np.isclose(t, best, rtol=1e-12, atol=0))}
    return best + problem.constant, argmins


def _eliminate(problem):
    """Exact min-sum variable elimination (min-degree order): the minimum over every combination."""
    unary, pair = _factors(problem)
    factors = [((g,), u) for g, u in enumerate(unary)] + [((a, b), m) for (a, b), m in pair]
    remaining = set(range(len(unary)))
    while remaining:
        def width(var):
            return len({v for vs, _ in factors if var in vs for v in vs})

        var = min(sorted(remaining), key=width)
        touching = [f for f in factors if var in f[0]]
        factors = [f for f in factors if var not in f[0]]
        scope = sorted({v for vs, _ in touching for v in vs})
        table = np.zeros([len(unary[v]) for v in scope])
        for vs, t in touching:
            order = sorted(vs)
            t = np.transpose(t, [vs.index(v) for v in order])
            table = table + t.reshape([len(unary[v]) if v in vs else 1 for v in scope])
        reduced = table.min(axis=scope.index(var))
        rest = tuple(v for v in scope if v != var)
        factors.append((rest, reduced))
        remaining.discard(var)
    return float(sum(np.asarray(t).sum() for vs, t in factors if not vs)) + problem.constant


def _check_against_cost_model(planned, problem, choice, hw):
    """The problem's objective of the searched plan is the cost model's total for it, on the search's weights (less
    the combined gradient messages the search does not charge)."""
    costs = plan_cost(planned, planned.plan.mesh)
    grads = grad_values(planned)
    combined = sum(combined_gradient_messages(planned, n, n.strategy, grads) for n in planned.node_list())
    expected = sum(c.time(hw) for c in costs.values()) - hw.alpha * combined
    np.testing.assert_allclose(problem.objective(choice), expected, rtol=1e-9)


@pytest.mark.parametrize("search_mode", SEARCH_MODES)
def test_mlp_plan_is_the_brute_force_optimum(search_mode):
    x, y = mlp_data(16, 64)
    planned, problem = _problem(search_mlp(layers=2, width=64), (x, y), search_mode)
    print("combinations:", np.prod([v.size for v in problem.variables], dtype=float))
    assert np.prod([v.size for v in problem.variables], dtype=float) > 1e5
    solution = solve_ilp(problem)
    best, argmins = _brute_force(problem)
    assert len(planned.order) <= 30
    np.testing.assert_allclose(solution.objective, best, rtol=1e-9)
    assert tuple(solution.choice) in argmins
    np.testing.assert_allclose(_eliminate(problem), best, rtol=1e-12)  # the transformer's reference agrees here
    searched = {n.id: n.strategy.in_strategy() for n in planned.node_list()}
    chosen = {nid: var.strategy(solution.choice[g]).in_strategy()
              for g, var in enumerate(problem.variables) for nid in var.nodes}
    assert searched == chosen  # the pass planned exactly the ILP's solution
    _check_against_cost_model(planned, problem, solution.choice, _hw(search_mode))


@pytest.mark.parametrize("search_mode", SEARCH_MODES)
def test_transformer_plan_is_the_exact_optimum(search_mode):
    x, y = (np.random.default_rng(s).normal(size=(32, 32)).astype(np.float32) for s in (0, 1))
    planned, problem = _problem(TinyTransformer(), (x, y), search_mode)
    assert len(planned.order) <= 30, len(planned.order)
    sizes = [v.size for v in problem.variables]
    print("combinations:", np.prod(sizes, dtype=float))
    assert np.prod(sizes, dtype=float) > 1e12  # beyond enumeration: the elimination is the reference
    solution = solve_ilp(problem)
    np.testing.assert_allclose(solution.objective, _eliminate(problem), rtol=1e-9)
    _check_against_cost_model(planned, problem, solution.choice, _hw(search_mode))
