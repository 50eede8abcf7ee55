"""A MindSpore-style network and the two ways to train it the tests compare: MindSpore 2.x's functional loop
(``value_and_grad`` + ``optimizer(grads)`` in a ``@ms.jit`` step) and ``Model.train``'s ``TrainOneStepCell``."""

import numpy as np

import graphpar as ms
from graphpar import nn, ops

RNG = np.random.default_rng(7)
X = RNG.normal(size=(16, 16)).astype(np.float32)
Y = RNG.normal(size=(16, 8)).astype(np.float32)
W1 = (RNG.normal(size=(16, 32)) * 0.2).astype(np.float32)
W2 = (RNG.normal(size=(32, 8)) * 0.2).astype(np.float32)


class Net(nn.Cell):
    """The seed quickstart's shape: a hinted MatMul, a ReLU and a MatMul whose strategies the planner picks."""

    def __init__(self):
        super().__init__()
        self.w1 = ms.Parameter(ms.Tensor(W1), name="w1")
        self.w2 = ms.Parameter(ms.Tensor(W2), name="w2")
        self.matmul = ops.MatMul().shard(((2, 4), (4, 1)))
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul(x, self.w1)), self.w2)


def _dump_to(dumps):
    ms.set_context(save_graphs=dumps is not None)
    if dumps is not None:
        ms.set_context(save_graphs_path=str(dumps))


def functional_loop(steps=3, dumps=None, wrap=None, through_loss_cell=False):
    """MindSpore 2.x's functional loop; returns (losses, net, optimizer, the jitted step)."""
    _dump_to(dumps)
    net = Net()
    loss_fn = nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    net_with_loss = nn.WithLossCell(net, loss_fn) if through_loss_cell else None

    def forward_fn(data, label):
        if through_loss_cell:
            return net_with_loss(data, label), None
        logits = net(data)
        return loss_fn(logits, label), logits

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

    @ms.jit
    def train_step(data, label):
        (loss, _), grads = grad_fn(data, label)
        optimizer(grads)
        return loss

    step = wrap(train_step) if wrap is not None else train_step
    return [float(step(X, Y)) for _ in range(steps)], net, optimizer, train_step


def model_train(steps=3, dumps=None):
    """The same network and optimizer trained by a TrainOneStepCell (Model.train's step)."""
    _dump_to(dumps)
    net = Net()
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    return [float(train(X, Y)) for _ in range(steps)], net, optimizer


def dump_file(directory, rank, kind):
    """The text of the train step's ``kind`` dump of ``rank`` in ``directory`` (dump numbers count a process's
    programs; a ``has_aux`` function's auxiliary outputs have a forward graph of their own)."""
    texts = [f.read_text() for f in sorted((directory / f"rank_{rank}").glob(f"*{kind}_*.ir"))]
    train = [t for t in texts if "purpose: train" in t.splitlines()[2]]
    assert len(train) == 1, [t.splitlines()[2] for t in texts]
    return train[0]


def dump_text(directory, rank, kind):
    """The one ``kind`` dump (``execute`` or ``step_parallel_begin``) of ``rank`` in ``directory``, without the
    lines that name the graph or time the passes."""
    return [line for line in dump_file(directory, rank, kind).splitlines()
            if not line.startswith(("# graph:", "# passes:"))]
