"""The overflow check of a loss-scaled step (O2, ``TrainOneStepWithLossScaleCell``) is one flag computed once, by an
``all_finite`` that sees any inf or NaN: the compiled step grows with the number of parameters, not with its square (per-leaf flags reduced by ``all`` became a
chain of ``and``s that XLA copied into every parameter's update: O2 compiled twice as long as O0 on ResNet-18 and
the GPT bench model's update alone took 27 s)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.nn.loss_scale import all_finite


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_sees_one_bad_element_in_any_leaf(dtype, bad):
    leaves = {"w": np.ones((33, 7), np.float32), "b": np.full(1001, 3e4, np.float32), "step": np.int32(3)}
    check = jax.jit(all_finite)
    assert bool(check(jax.tree.map(lambda x: jnp.asarray(x, x.dtype if x.dtype == np.int32 else dtype), leaves)))
    for name, index in (("w", (0, 0)), ("w", (20, 5)), ("b", 1000)):
        broken = {k: np.array(v) for k, v in leaves.items()}
        broken[name][index] = bad
        tree = jax.tree.map(lambda x: jnp.asarray(x, x.dtype if x.dtype == np.int32 else dtype), broken)
        assert not bool(check(tree)), (name, index)


def _compiled_lines(layers: int, loss_scaled: bool) -> tuple[int, int]:
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(8, 8, activation="relu") for _ in range(layers)])
    with_loss = nn.WithLossCell(net, nn.MSELoss())
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    train = (nn.TrainOneStepWithLossScaleCell(with_loss, optimizer, nn.DynamicLossScaleUpdateCell(2.0 ** 10, 2, 100))
             if loss_scaled else nn.TrainOneStepCell(with_loss, optimizer))
    x = np.ones((4, 8), np.float32)
    text = train.program.stages([x, x]).compiled.as_text()
    return text.count("\n"), len(re.findall(r" and\(", text))


def test_the_overflow_flag_is_not_copied_into_every_parameter_update():
    """What loss scaling adds to the compiled step grows linearly with the parameters (twice the layers, about twice
    the lines; it was four times, and 12 layers' step held 24 x 23 ``and``s), with a handful of ``and``s."""
    extra = {}
    for layers in (6, 12):
        plain, _ = _compiled_lines(layers, loss_scaled=False)
        scaled, ands = _compiled_lines(layers, loss_scaled=True)
        assert ands <= 4, (layers, ands)
        extra[layers] = scaled - plain
    assert extra[12] < 2.5 * extra[6], extra
