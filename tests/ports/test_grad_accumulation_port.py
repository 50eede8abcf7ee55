"""MindSpore's gradient-accumulation sample (scripts/grad_accumulation_port.py: ``GradAccumulation(WithLossCell,
4)`` in ``AutoParallel(...).hsdp()`` under ``Model.train``), imports changed only, checked for the tutorial's
claim: accumulating four micro-batches' gradients and stepping once is the large-batch step. The wrapper returns
the sum of the four micro-batches' mean losses, four times the batch's mean loss, so its gradient is four times the
large batch's: plain SGD with four times the learning rate takes the same steps."""

import numpy as np

from tests.ports.scripts.grad_accumulation_port import train


def test_four_accumulated_micro_batches_step_as_the_large_batch():
    accumulated, weights = train(micro_size=4, lr=1e-2)
    large, large_weights = train(micro_size=None, lr=4e-2)
    assert len(accumulated) == 12 and accumulated[-1] < accumulated[0]
    np.testing.assert_allclose(accumulated, 4 * np.asarray(large), rtol=1e-5)
    for name, value in weights.items():
        np.testing.assert_allclose(value, large_weights[name], rtol=1e-5, atol=1e-7, err_msg=name)
