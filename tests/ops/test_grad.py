"""MindSpore's gradient APIs: GradOperation on Cells (custom train cells) and functional value_and_grad."""

import numpy as np

import graphpar as ms
from graphpar import ParameterTuple, nn, ops

from tests.train.helpers import MLP, regression_data


class MyTrain(nn.Cell):
    """A MindSpore-style custom training cell: GradOperation for the gradients, the optimizer called on them."""

    def __init__(self, network, optimizer):
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer
        self.weights = ParameterTuple(network.trainable_params())
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, *inputs):
        loss = self.network(*inputs)
        self.optimizer(self.grad(self.network, self.weights)(*inputs))
        return loss


def test_grad_operation_by_list_matches_train_one_step_cell():
    x, y = regression_data(16)
    net = nn.WithLossCell(MLP(), nn.MSELoss())
    weights = ParameterTuple(net.trainable_params())
    grads = ops.GradOperation(get_by_list=True)(net, weights)(x, y)
    assert len(grads) == len(weights) and all(g.shape == w.shape for g, w in zip(grads, weights))
    # one SGD step by hand equals one TrainOneStepCell step
    before = {w.name: w.asnumpy() for w in weights}
    train = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), 0.1))
    train(x, y)
    for w, g in zip(weights, grads):
        np.testing.assert_allclose(w.asnumpy(), before[w.name] - 0.1 * np.asarray(g), rtol=1e-5, atol=1e-6)


def test_grad_operation_inputs_and_sens():
    net = nn.Dense(3, 2, weight_init="ones", bias_init="zeros")
    x = np.ones((4, 3), np.float32)
    gx = ops.GradOperation()(net)(x)
    np.testing.assert_allclose(np.asarray(gx), np.full((4, 3), 2.0))
    gx2 = ops.GradOperation(sens_param=True)(net)(x, np.full((4, 2), 0.5, np.float32))
    np.testing.assert_allclose(np.asarray(gx2), np.full((4, 3), 1.0))


def test_custom_train_cell_with_grad_operation_and_optimizer_call():
    x, y = regression_data(16)
    net = nn.WithLossCell(MLP(), nn.MSELoss())
    step = MyTrain(net, nn.Momentum(net.trainable_params(), 0.05, 0.9))
    losses = [float(step(x, y)) for _ in range(5)]
    assert losses[-1] < losses[0]


def test_functional_value_and_grad_with_aux():
    net = MLP()
    loss_fn = nn.MSELoss()
    x, y = regression_data(16)

    def forward(data, label):
        logits = net(data)
        return loss_fn(logits, label), logits

    opt = nn.SGD(net.trainable_params(), 0.1)
    grad_fn = ms.value_and_grad(forward, None, opt.parameters, has_aux=True)
    (loss, logits), grads = grad_fn(x, y)
    assert logits.shape == (16, 8) and len(grads) == len(opt.parameters)
    opt(grads)
    (loss2, _), _ = grad_fn(x, y)
    assert float(loss2) < float(loss)
    assert all(isinstance(p.get_raw_value(), type(p.get_raw_value())) for p in opt.parameters)


def test_model_trains_a_custom_train_cell():
    from graphpar.train import LossMonitor, Model
    from tests.train.helpers import array_dataset

    x, y = regression_data(64)
    net = nn.WithLossCell(MLP(), nn.MSELoss())
    model = Model(MyTrain(net, nn.Momentum(net.trainable_params(), 0.05, 0.9)))
    losses = []

    class Keep(LossMonitor):
        def step_end(self, rc):
            losses.append(float(np.mean(np.asarray(rc.original_args().net_outputs))))

    model.train(2, array_dataset(x, y, batch_size=16), callbacks=[Keep()])
    assert len(losses) == 8 and losses[-1] < losses[0]
