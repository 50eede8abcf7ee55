"""``Cell.recompute()`` in a network that takes its gradient inside ``construct`` (``GradOperation`` called by a
Cell that is run as a forward program, MindSpore's recompute sample): JAX traces that gradient into the program at
once, so the recomputed Cell runs under ``jax.checkpoint`` while it is traced; its backward recomputation becomes
nodes of one ``Node.remat`` run (the recomputed ops planned as ops), lowered as one checkpoint behind an
optimization barrier. The gradient is unchanged, a stochastic op's mask included."""

import numpy as np

import graphpar as ms
from graphpar import nn, ops
from graphpar.compile.lowering import recompute
from graphpar.compile.runtime.forward import program_for


class Block(nn.Cell):
    def __init__(self, dropout=False):
        super().__init__()
        self.fc = nn.Dense(8, 8)
        self.act = ops.Tanh()
        self.dropout = ops.Dropout(0.75) if dropout else None

    def construct(self, x):
        x = self.act(self.fc(x))
        if self.dropout is not None:
            x = self.dropout(x)[0]
        return x


class Net(nn.Cell):
    def __init__(self, marked, dropout=False):
        super().__init__()
        self.block = Block(dropout)
        if marked:
            self.block.recompute()
        self.head = nn.Dense(8, 1)

    def construct(self, x):
        return self.head(self.block(x)).sum()


class InputGrad(nn.Cell):
    """The gradient of ``net`` with respect to its input, taken in ``construct`` (MindSpore 1.x style)."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.grad = ops.GradOperation()

    def construct(self, x):
        return self.grad(self.net)(x)


X = ms.Tensor(np.random.default_rng(0).normal(size=(16, 8)).astype(np.float32))


def _grads(marked, dropout=False, calls=1):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    ms.set_seed(3)
    grad = InputGrad(Net(marked, dropout))
    return grad, [grad(X).asnumpy() for _ in range(calls)]


def test_recompute_under_a_gradient_taken_in_construct_is_applied(notices):
    _, (plain,) = _grads(False)
    grad, (marked,) = _grads(True)
    np.testing.assert_allclose(marked, plain, rtol=1e-6)
    program = program_for(grad)
    graph = program.planned(X).graph
    recomputed = [n for n in graph.node_list() if n.remat is not None]
    # the backward recomputes the block's forward (an op JAX kept whole is planned as that op: BiasAdd; the rest
    # as the primitives JAX split them into: jax 0.10 splits Tanh into tanh and its derivative's sub and mul, jax
    # 0.12 keeps it whole) next to its transposes
    kinds = {n.kind for n in recomputed}
    assert {"BiasAdd", "dot_general", "mul"} <= kinds and kinds & {"Tanh", "tanh"}
    assert all(n.strategy is not None and n.provenance.kind != "fallback" for n in recomputed)
    assert "optimization_barrier" in program.lower(X).as_text()
    assert not [r for r in notices.records if "not applied" in r.getMessage()]


def test_a_recomputed_dropout_draws_the_forward_mask_again():
    """The recomputation draws the mask from the key the forward used, and the key advances once per call."""
    _, plain = _grads(False, dropout=True, calls=2)
    _, marked = _grads(True, dropout=True, calls=2)
    for got, want in zip(marked, plain):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert (plain[0] != plain[1]).any()


def test_a_forward_of_a_recomputed_network_has_nothing_to_recompute():
    """Without a gradient in construct there is no backward pass in the program: no recomputation run."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    net = Net(True)
    net(X)
    assert not recompute.recomputes_in_backward(program_for(net).planned(X).graph)
