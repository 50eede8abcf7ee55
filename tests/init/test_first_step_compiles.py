"""The first step compiles the step alone, nothing per parameter shape and no optimizer ``init``: a parameter drawn
eagerly (on one device) reaches its planned layout from the host, with no program (JAX's own route, a jitted
``_multi_slice`` per shape, cost the GPT bench model seven compiles, 0.3 s of its 1.5 s first step)."""

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell
from tests.init.compiles import compiled_names


def test_first_gpt_step_in_semi_auto_compiles_no_helper_per_parameter_shape():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    train = gpt_train_cell(GPT(layers=2))
    ids, labels = gpt_data()
    with compiled_names() as names:
        loss = float(train(ids, labels))
    assert np.isfinite(loss)
    # the step alone: the optimizer state (zeros, counts) is made on the host and copied to its shardings
    assert names == ["step"], names
    params = train.network.trainable_params()
    split = [p for p in params if not p.get_value().sharding.is_fully_replicated]
    assert len({p.shape for p in split}) >= 4  # several split shapes, each placed without a program


def test_eager_initializers_compile_per_size_bucket_not_per_shape():
    """Building layers of six shapes draws them with at most one program: a draw's elements depend only on their
    position, so every size up to 1024 shares one padded draw."""
    ms.set_seed(0)
    with compiled_names() as names:
        nets = [nn.Dense(a, b) for a, b in ((30, 20), (20, 10), (10, 5))]
    assert len(nets) == 3 and set(names) <= {"draw_values"} and len(names) <= 1, names
