"""MindSpore's pipeline tutorial's functional loop (scripts/pipeline_functional_port.py: ``value_and_grad`` of a
``PipelineCell``'s loss, ``PipelineGradReducer``, ``optimizer(grads)``), imports changed only, checked for the
tutorial's claims and against ``Model.train``: the loss falls; the step is the same pipelined step (2 stages of 4
devices, 4 micro-batches) with the same losses, trained parameters, plans, per-stage execute dumps and schedule;
the gradients it returns live on their stage's devices; MindSpore 2.6's form (``no_init_parameters``,
``Pipeline(stage_config=...)``, ``AutoParallel(train_one_step).pipeline(stages=2)``) trains alike, its settings in
force for its calls only, under every schedule."""

import re

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.dump.pipeline import read_schedule
from tests.ports.scripts.pipeline_functional_port import train


def _dumps(directory, rank):
    """Each dump kind of ``rank`` with what differs between two runs of one process taken out (the dump's number
    and its passes' timings)."""
    out = {}
    for path in sorted((directory / f"rank_{rank}").iterdir()):
        kind = re.sub(r"_\d+\.ir$", "", path.name)
        out[kind] = [line for line in path.read_text().splitlines() if not line.startswith(("# passes:", "# execute:"))]
    return out


def test_functional_pipeline_loop_equals_model_train(tmp_path):
    runs = {}
    for style in ("jit", "model"):
        ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path / style))
        runs[style] = train(style)
    ms.set_context(save_graphs=False)
    (losses, net, grads), (expected, net_ref, _) = runs["jit"], runs["model"]
    assert len(losses) == 8 and sum(losses[-2:]) < sum(losses[:2])
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    for p, q in zip(net.trainable_params(), net_ref.trainable_params()):
        np.testing.assert_allclose(p.asnumpy(), q.asnumpy(), rtol=1e-6, atol=1e-7)
    for rank in (0, 7):
        functional, model = _dumps(tmp_path / "jit", rank), _dumps(tmp_path / "model", rank)
        assert sorted(functional) == ["18_execute", "pipeline_schedule", "step_parallel_begin"]
        assert functional == model
    execute = "\n".join(_dumps(tmp_path / "jit", 0)["18_execute"])
    assert "in_strategy: ((1, 4), (4, 1))" in execute and "AllReduce(" in execute  # layer1's split contraction
    assert "layer3" not in execute
    schedule = read_schedule(next((tmp_path / "jit" / "rank_7").glob("pipeline_schedule_*.ir")))
    assert schedule["stages"] == 2 and schedule["micro_size"] == 4
    assert sorted(t["micro"] for t in schedule["receives"] if t["pass"] == "forward") == [0, 1, 2, 3]
    # the step returns the micro-batches' accumulated gradients, each where its stage keeps its Parameter
    by_name = dict(zip([p.name for p in net.trainable_params()], grads))
    assert {d.id for d in by_name["layer1.param"].sharding.device_set} == {0, 1, 2, 3}
    assert {d.id for d in by_name["layer3.weight"].sharding.device_set} == {4, 5, 6, 7}
    assert all(np.isfinite(g.asnumpy()).all() for g in grads)


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["1f1b", "gpipe"])
def test_auto_parallel_pipeline_form_trains_as_the_context_form(scheduler):
    expected, _, _ = train("jit")
    ms.reset_auto_parallel_context()
    losses, net, _ = train("auto_parallel", scheduler=scheduler)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    assert ms.get_auto_parallel_context("pipeline_stages") == 1  # the wrapper's settings were its calls' only
    devices = {p.name: {d.id for d in p.get_raw_value().sharding.device_set} for p in net.trainable_params()}
    assert devices["layer1.param"] == {0, 1, 2, 3} and devices["layer3.bias"] == {4, 5, 6, 7}
