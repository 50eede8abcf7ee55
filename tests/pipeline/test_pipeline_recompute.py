"""A recomputed Cell inside a pipeline stage: the stage's programs are compiled with XLA:CPU's memory-optimized
scheduler (as a whole recomputing program is, ``compile.lowering.recompute.compiler_options``; a stage's forward
also keeps only op outputs for its backward, so every stage program recomputes something and gets it), and the losses
are those of the run without recomputation."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.compile.lowering import recompute

from .helpers import mlp_data
from .models import mlp4


def _train(recompute_first_stage: bool):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2)
    net = mlp4(stages=2)
    if recompute_first_stage:
        for layer in list(net.layers)[:2]:  # layers 0 and 1 are stage 0's
            layer.recompute()
    cell = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4),
                               nn.Momentum(net.trainable_params(), 0.05, 0.9))
    x, y = mlp_data()
    losses = [float(cell(x, y)) for _ in range(3)]
    return losses, next(iter(cell.program._built.values()))


def test_a_recomputing_stage_is_compiled_with_the_memory_scheduler():
    if not recompute._memory_scheduler_known("cpu"):
        pytest.skip("this XLA:CPU takes no per-compilation scheduler option")
    plain, _ = _train(False)
    losses, built = _train(True)
    np.testing.assert_allclose(losses, plain, rtol=1e-6)
    memory = ((recompute.SCHEDULER_OPTION, recompute.MEMORY_SCHEDULER),)
    first, _ = built.stages
    assert first.compiled["backward"].lowered.compiler_options == memory
    assert first.compiled["forward"].lowered.compiler_options == memory
