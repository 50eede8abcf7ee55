"""``@ms.jit`` on MindSpore 2.x's functional training step: planned and compiled as ``Model.train``'s step.

The step closes over a network and an optimizer; ``graphpar.jit`` makes their Parameters and the optimizer's state
the compiled program's inputs and outputs, plans the differentiated function's graph with the same planner call
(``planner.planning.plan_graph``), and writes the trained values back into the Parameters after every call."""

import re

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.errors import JitError

from tests.functional.steps import X, Y, Net, dump_file, dump_text, functional_loop, model_train


def test_semi_auto_functional_loop_equals_model_train_losses_parameters_and_dumps(tmp_path):
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    losses, net, _, _ = functional_loop(dumps=tmp_path / "jit", through_loss_cell=True)
    expected, net_ref, _ = model_train(dumps=tmp_path / "model")
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    for p, q in zip(net.get_parameters(), net_ref.get_parameters()):
        np.testing.assert_allclose(p.asnumpy(), q.asnumpy(), rtol=1e-6)
    for rank in (0, 5):
        for kind in ("step_parallel_begin", "18_execute"):
            assert dump_text(tmp_path / "jit", rank, kind) == dump_text(tmp_path / "model", rank, kind)
    execute = "\n".join(dump_text(tmp_path / "jit", 0, "18_execute"))
    assert "MatMul(" in execute and "in_strategy: ((2, 4), (4, 1))" in execute and "AllReduce(" in execute


def test_the_docs_forward_fn_with_logits_trains_as_model_train_does(tmp_path):
    """``forward_fn`` returning ``(loss, logits)`` with ``has_aux=True``, the loss network called directly."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    losses, net, optimizer, train_step = functional_loop(steps=4, dumps=tmp_path)
    expected, _, _ = model_train(steps=4, dumps=tmp_path / "model")
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert losses[-1] < losses[0]

    def collectives(directory):  # the discarded logits' forward is dropped by XLA: Model.train's collectives
        return [re.sub(r"scope: \(.*?\)", "", line) for line in dump_text(directory, 0, "18_execute")
                if line.startswith(("%c", "# total"))]

    assert collectives(tmp_path) == collectives(tmp_path / "model") and len(collectives(tmp_path)) > 3
    begins = [p.read_text() for p in sorted((tmp_path / "rank_0").glob("step_parallel_begin_*.ir"))]
    assert any("# graph: forward_fn_train" in b and "scope: (Default/network-Net)" in b for b in begins)
    sharded = [p for p in net.get_parameters() if p.name == "w1"][0].get_value()
    assert len(sharded.sharding.device_set) == 8  # the trained Parameter lives on the mesh, not on device 0
    assert optimizer.opt_state is not None
    (entry,) = train_step.programs.values()
    # one program for the whole loop; two graphs traced and planned: the loss's and the logits' forward (has_aux)
    assert entry.program.counts.compiles == 1 and entry.program.counts.traces == 2


def test_sharding_propagation_and_data_parallel_loops_equal_model_train(tmp_path):
    for settings in ({"parallel_mode": "auto_parallel", "search_mode": "sharding_propagation"},
                     {"parallel_mode": "data_parallel", "gradients_mean": True}):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(**settings)
        losses, _, _, _ = functional_loop(dumps=tmp_path / settings["parallel_mode"])
        expected, _, _ = model_train()
        np.testing.assert_allclose(losses, expected, rtol=1e-6)
    propagated = dump_file(tmp_path / "auto_parallel", 0, "step_parallel_begin")
    relu = next(l for l in propagated.splitlines() if "{instance name: relu}" in l)
    assert "propagated from matmul" in relu
    data_parallel = dump_file(tmp_path / "data_parallel", 0, "18_execute")
    assert "cause: gradient reduction" in data_parallel


def test_auto_parallel_wrapper_plans_the_step_in_its_mode_only(tmp_path):
    from graphpar.parallel import AutoParallel
    from graphpar.parallel.auto_parallel import AutoParallel as same

    assert AutoParallel is same
    losses, _, _, _ = functional_loop(dumps=tmp_path, wrap=lambda step: AutoParallel(step, parallel_mode="semi_auto"))
    assert ms.get_auto_parallel_context("parallel_mode") == "stand_alone"  # the wrapper's mode was its call's only
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    expected, _, _ = model_train()
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert "in_strategy: ((2, 4), (4, 1))" in dump_file(tmp_path, 0, "step_parallel_begin")
    with pytest.raises(JitError, match="AutoParallel.parallel_mode='semi'.; valid: 'semi_auto', 'sharding_propagation'"):
        AutoParallel(lambda x: x, parallel_mode="semi")
    with pytest.raises(JitError, match=r"AutoParallel.print_local_norm\): not built"):
        AutoParallel(lambda x: x).print_local_norm()


def test_eager_gradient_in_a_parallel_mode_says_once_that_it_is_unplanned(notices):
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    net, loss_fn = Net(), nn.MSELoss()

    def forward_fn(data, label):
        return loss_fn(net(data), label)

    grad_fn = ms.value_and_grad(forward_fn, None, net.trainable_params())
    for _ in range(2):
        grad_fn(X, Y)
    said = [r.getMessage() for r in notices.records if "runs eagerly on one device" in r.getMessage()]
    assert len(said) == 1 and "value_and_grad of 'forward_fn'" in said[0] and "@ms.jit" in said[0]


def test_grad_and_grad_operation_steps_and_the_method_form_compile_the_same_step():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    expected, _, _ = model_train()

    net = Net()
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    grad_op = ms.ops.GradOperation(get_by_list=True)

    @ms.jit
    def grad_operation_step(data, label):
        loss = loss_net(data, label)
        optimizer(grad_op(loss_net, optimizer.parameters)(data, label))
        return loss

    class Trainer:
        def __init__(self):
            self.net = Net()
            self.loss_net = nn.WithLossCell(self.net, nn.MSELoss())
            self.optimizer = nn.Momentum(self.net.trainable_params(), 0.05, 0.9)
            self.grad_fn = ms.grad(self.loss_net, None, self.optimizer.parameters)

        @ms.jit
        def step(self, data, label):
            self.optimizer(self.grad_fn(data, label))

    trainer = Trainer()
    for _ in range(3):
        trainer.step(X, Y)
    with_grad_op = [float(grad_operation_step(X, Y)) for _ in range(3)]
    np.testing.assert_allclose(with_grad_op, expected, rtol=1e-6)
    reference = Net()
    ref_opt = nn.Momentum(reference.trainable_params(), 0.05, 0.9)
    ref = nn.TrainOneStepCell(nn.WithLossCell(reference, nn.MSELoss()), ref_opt)
    for _ in range(3):
        ref(X, Y)
    for p, q in zip(trainer.net.get_parameters(), reference.get_parameters()):
        np.testing.assert_allclose(p.asnumpy(), q.asnumpy(), rtol=1e-6)


class CustomTrainOneStep(nn.Cell):
    """MindSpore 1.x's hand-written train cell: the gradient and the update taken inside ``construct``."""

    def __init__(self, network, optimizer, sens=1.0):
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ms.ops.GradOperation(get_by_list=True, sens_param=True)
        self.sens = sens

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ms.ops.fill(loss.dtype, loss.shape, self.sens)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        return ms.ops.depend(loss, self.optimizer(grads))


def test_gradients_taken_inside_a_cell_compile_as_model_train_step(tmp_path):
    """A top-level call of a Cell holding an optimizer is compiled as a step (graphpar.jit of its construct). Its
    ``loss = self.network(*inputs)`` before the GradOperation is the gradient's own forward, as MindSpore's
    compiler merges the two: the execute dump is Model.train's."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    expected, _, _ = model_train(dumps=tmp_path / "model")
    ms.set_context(save_graphs_path=str(tmp_path / "cell"))
    net = Net()
    train = CustomTrainOneStep(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.05, 0.9))
    losses = [float(train(X, Y)) for _ in range(3)]
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    for kind in ("step_parallel_begin", "18_execute"):
        assert dump_text(tmp_path / "cell", 0, kind) == dump_text(tmp_path / "model", 0, kind)


def test_strategy_file_and_checkpoint_are_model_trains(tmp_path):
    files = {}
    for how in ("jit", "model"):
        ms.reset_auto_parallel_context()
        files[how] = tmp_path / f"{how}_strategy.ckpt"
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", strategy_ckpt_save_file=str(files[how]))
        if how == "jit":
            _, net, _, _ = functional_loop(steps=2, through_loss_cell=True)
        else:
            _, net_ref, _ = model_train(steps=2)
    assert files["jit"].read_bytes() == files["model"].read_bytes()
    ms.save_checkpoint(net, str(tmp_path / "net.ckpt"))
    fresh = Net()
    ms.load_param_into_net(fresh, ms.load_checkpoint(str(tmp_path / "net.ckpt")))
    for p, q in zip(fresh.get_parameters(), net_ref.get_parameters()):
        np.testing.assert_allclose(p.asnumpy(), q.asnumpy(), rtol=1e-6)


def test_a_jitted_step_is_compiled_and_planned_in_pynative_mode_too(tmp_path):
    """MindSpore's ``jit`` compiles its function in PyNative mode: the step is planned over the 8 devices."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    expected, _, _ = model_train()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    losses, net, _, _ = functional_loop(dumps=tmp_path)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert "mesh: m0=2 m1=2 m2=2" in dump_file(tmp_path, 0, "18_execute")
    assert len(next(net.get_parameters()).get_value().sharding.device_set) == 8


def test_model_trains_an_auto_parallel_cell_in_its_mode(notices):
    """MindSpore 2.6: ``Model(AutoParallel(net, parallel_mode=...), ...)``; the wrapper sets the job's mode."""
    import graphpar.dataset as ds
    from graphpar.parallel import AutoParallel
    from graphpar.train import Model

    def trained(wrap):
        net = Net()
        model = Model(wrap(net), nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9))
        model.train(1, ds.NumpySlicesDataset((X, Y), ["x", "y"], shuffle=False).batch(2))
        return [p.asnumpy() for p in net.get_parameters()]

    wrapped = trained(lambda net: AutoParallel(net, parallel_mode="semi_auto"))
    assert ms.get_auto_parallel_context("parallel_mode") == "semi_auto_parallel"
    assert any("graphpar sets the job's parallel_mode='semi_auto_parallel'" in r.getMessage() for r in notices.records)
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    for p, q in zip(wrapped, trained(lambda net: net)):
        np.testing.assert_allclose(p, q, rtol=1e-6)


def test_a_rebound_global_network_is_captured_again():
    """A step that names ``net`` and ``optimizer`` globals trains the objects they name at each call."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    scope = {"ms": ms}
    exec("def train_step(x, y):\n"
         "    loss, grads = grad_fn(x, y)\n"
         "    optimizer(grads)\n"
         "    return loss\n", scope)
    step = ms.jit(scope["train_step"])
    for _ in range(2):
        net, loss_fn = Net(), nn.MSELoss()
        scope["optimizer"] = nn.Momentum(net.trainable_params(), 0.05, 0.9)
        scope["grad_fn"] = ms.value_and_grad(lambda x, y, net=net: loss_fn(net(x), y), None, net.trainable_params())
        before = net.w1.asnumpy().copy()
        step(X, Y)
        assert not np.allclose(net.w1.asnumpy(), before)  # this round's network was trained
    assert len(step.programs) == 1


def test_step_inputs_not_given_to_the_gradient_are_replicated_and_returned_structures_kept():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    expected, _, _ = model_train(steps=2)
    net, loss_fn = Net(), nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)

    @ms.jit
    def train_step(scale, data, label):
        loss, grads = grad_fn(data, label)
        optimizer(grads)
        return {"loss": loss, "scaled": loss * scale}

    outs = [train_step(np.float32(2.0), X, Y) for _ in range(2)]
    np.testing.assert_allclose([float(o["loss"]) for o in outs], expected, rtol=1e-6)
    np.testing.assert_allclose([float(o["scaled"]) for o in outs], [2 * e for e in expected], rtol=1e-6)
    (entry,) = train_step.programs.values()
    assert entry.captured.inputs_of_graph == (1, 2)  # the gradient call's arguments are step inputs 1 and 2


def test_auxiliary_outputs_of_has_aux_are_the_planned_forwards(tmp_path):
    """``(loss, logits), grads = grad_fn(...)`` with the logits used in the step: they come from the function's
    forward graph planned on the same mesh, at the parameters the gradient was taken at."""
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    net, loss_fn = Net(), nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9)

    def forward_fn(data, label):
        logits = net(data)
        return loss_fn(logits, label), logits

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

    @ms.jit
    def train_step(data, label):
        (loss, logits), grads = grad_fn(data, label)
        optimizer(grads)
        return loss, logits.argmax(axis=1), logits

    reference = Net()
    for _ in range(2):
        expected = reference.matmul2(reference.relu(reference.matmul(ms.Tensor(X), reference.w1)), reference.w2)
        loss, predicted, logits = train_step(X, Y)
        np.testing.assert_allclose(np.asarray(logits), np.asarray(expected), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(predicted), np.asarray(expected).argmax(axis=1))
        np.testing.assert_allclose(float(loss), float(((np.asarray(expected) - Y) ** 2).mean()), rtol=1e-5)
        for p, q in zip(reference.get_parameters(), net.get_parameters()):
            p.set_data(ms.Tensor(q.asnumpy()))
