"""The acceptance matrix (slow): a 4-layer MLP and a GPT-style model, 2 and 4 stages, micro_size 4 and 8, GPipe
and 1F1B. Each run: 5 losses equal the unpipelined run (rtol 1e-5), exactly 2·(S−1)·micro_size activation-sized
tensors moved per step (counted by the runtime), and each stage's peak of live residuals: at most S micro-batches
with 1F1B (S − s on stage s), all micro_size with GPipe."""

import numpy as np
import pytest

from .helpers import gpt_data, mlp_data, params, train_pipelined, train_unpipelined

CASES = [(model, stages, micro, scheduler) for model in ("mlp", "gpt") for stages in (2, 4) for micro in (4, 8)
         for scheduler in ("gpipe", "1f1b")]
_REFERENCES = {}


def _reference(model, stages, micro, x, y, steps):
    key = (model, stages, micro)
    if key not in _REFERENCES:
        # the GPT reference is the whole batch on one device with sensitivity micro_size (the same gradient as the
        # sum of the micro-batches' mean losses): tracing 8 micro-batches of a GPT unpipelined costs minutes here
        losses, net = train_unpipelined(model, stages, micro, x, y, steps, whole_batch=model == "gpt")
        _REFERENCES[key] = (losses, params(net))
    return _REFERENCES[key]


@pytest.mark.slow
@pytest.mark.parametrize("model,stages,micro,scheduler", CASES)
def test_pipeline_matrix(model, stages, micro, scheduler):
    x, y = mlp_data() if model == "mlp" else gpt_data()
    steps = 5
    ref, want = _reference(model, stages, micro, x, y, steps)
    got, net, train = train_pipelined(model, stages, micro, scheduler, x, y, steps)
    print(f"\n{model} S={stages} micro={micro} {scheduler}: losses {np.round(got, 6).tolist()} reference "
          f"{np.round(ref, 6).tolist()}")
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    stats = train.program.stats
    print(f"  transfers/step {stats.transfers_last_step}, peak live micro-batches {stats.peak_live_micro_batches}, "
          f"peak residual bytes/device {stats.peak_residual_bytes}")
    assert stats.transfers_last_step == 2 * (stages - 1) * micro
    if scheduler == "1f1b":
        assert stats.peak_live_micro_batches == [min(stages - s, micro) for s in range(stages)]
    else:
        assert stats.peak_live_micro_batches == [micro] * stages
