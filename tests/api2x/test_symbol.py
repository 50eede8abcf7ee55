"""MindSpore's ``Symbol`` for a dynamic dimension: ``Tensor(shape=[Symbol(divisor=8), 16], dtype=...)``.

A ``Symbol(max=0, min=1, divisor=1, remainder=0, unique=False)`` says what is known of a dynamic size: it is
``divisor * N + remainder`` (``N >= 1``), at least ``min``, at most ``max`` (when ``max > min``), and one ``unique``
Symbol's dimensions are equal. graphpar traces it as ``divisor*k + remainder`` over a JAX symbol (with ``min`` /
``max`` as shape constraints), lets a strategy split such a dimension only into parts that divide what the Symbol
makes divide it (MindSpore's divisor check), and refuses a call whose size the Symbol does not admit."""

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import Symbol, Tensor, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.common.placeholder import symbolic_avals
from graphpar.errors import DynamicStrategyError, InputSignatureError
from graphpar.parallel import Layout
from tests.api2x.test_dynamic_shape import Head  # the two-layer head on a batch of any size


class Pair(nn.Cell):
    def __init__(self):
        super().__init__()
        self.add = ops.Add().shard(((2, 1), (2, 1)))

    def construct(self, x, y):
        return self.add(x, y)


def _batch(n):
    return Tensor(np.arange(n * 16, dtype=np.float32).reshape(n, 16) / (n * 16))


def _semi(**kw):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True, **kw)


def test_symbol_checks_its_arguments_as_mindspore():
    s = Symbol(divisor=8, remainder=1, max=64)
    assert (s.divisor, s.remainder, s.min, s.max, s.unique) == (8, 1, 1, 64, False)
    assert s.to_dict() == {"max": 64, "divisor": 8, "remainder": 1}  # MindSpore's summary of what is known
    x = Tensor(shape=[s, 16], dtype=ms.float32)
    assert x.shape == (-1, 16) and isinstance(x, Tensor)  # a Symbol dimension is dynamic (-1), as None
    with pytest.raises(TypeError, match="'divisor' must be int"):
        Symbol(divisor=2.0)
    with pytest.raises(TypeError, match="'unique' must be bool"):
        Symbol(unique=1)
    with pytest.raises(ValueError, match="'min' value should be positive"):
        Symbol(min=0)
    with pytest.raises(ValueError, match="'divisor' value should be positive"):
        Symbol(divisor=0)
    with pytest.raises(ValueError, match=r"'remainder' value should be in the range '\[0, 4\)'"):
        Symbol(divisor=4, remainder=4)


def test_the_symbolic_trace_knows_what_a_symbol_says():
    s8, u = Symbol(divisor=8), Symbol(min=20, max=32, unique=True)
    x, y = symbolic_avals([Tensor(shape=[s8, u], dtype=ms.float32), Tensor(shape=[u, None], dtype=ms.float32)])
    assert x.shape[0] % 8 == 0 and not x.shape[0] % 16 == 0  # a multiple of 8, of nothing more
    assert x.shape[1] == y.shape[0]  # one unique Symbol: one JAX symbol, the dimensions equal
    assert x.shape[1] >= 20 and x.shape[1] <= 32  # min / max as JAX shape constraints
    z, = symbolic_avals([Tensor(shape=[Symbol(divisor=8, remainder=4)], dtype=ms.float32)])
    assert z.shape[0] % 4 == 0 and not z.shape[0] % 8 == 0  # 8N + 4: a multiple of gcd(8, 4)
    assert jax.export.is_symbolic_dim(y.shape[1])


def test_a_symbol_placeholder_is_planned_once_and_each_call_matches_stand_alone():
    x16, x40 = _batch(16), _batch(40)
    ms.set_context(mode=ms.GRAPH_MODE)
    alone = Head()
    want16, want40 = float(alone(x16)), float(alone(x40))
    _semi()
    net = Head()
    signature = Tensor(shape=[Symbol(divisor=8), 16], dtype=ms.float32)
    net.set_inputs(signature)
    _cell_graph_executor.compile(net, signature)
    assert _cell_graph_executor._get_shard_strategy(net)["Default/MatMul-op0"] == [[8, 1], [1, 1]]
    np.testing.assert_allclose(float(net(x16)), want16, rtol=1e-5)
    np.testing.assert_allclose(float(net(x40)), want40, rtol=1e-5)


def test_a_split_the_symbol_divides_is_accepted_one_it_does_not_is_refused():
    _semi()
    for symbol, split in ((Symbol(divisor=8), 8), (Symbol(divisor=2), 2), (Symbol(divisor=8, remainder=4), 4)):
        net = Head(((split, 1), (1, 1)))
        _cell_graph_executor.compile(net, Tensor(shape=[symbol, 16], dtype=ms.float32))
        assert _cell_graph_executor._get_shard_strategy(net)["Default/MatMul-op0"] == [[split, 1], [1, 1]]
    # the same 8-way split where the Symbol makes the batch only a multiple of 2 (or of gcd(8, 4) = 4): refused
    for symbol, known in ((Symbol(divisor=2), 2), (Symbol(divisor=8, remainder=4), 4)):
        with pytest.raises(DynamicStrategyError, match=f"dimension 0 is dynamic with a Symbol that makes it a "
                                                      f"multiple of {known}, which a split of 8 does not divide"):
            _cell_graph_executor.compile(Head(), Tensor(shape=[symbol, 16], dtype=ms.float32))


def test_one_ranks_symbol_is_scaled_to_the_global_batch():
    # without full_batch each rank's batch is 1/8 of the global one (MindSpore's ParallelSymbolInfo): a rank's
    # Symbol(divisor=2) is a global multiple of 16, which the split 8 divides; full_batch keeps it a multiple of 2
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=False)
    _cell_graph_executor.compile(Head(), Tensor(shape=[Symbol(divisor=2), 16], dtype=ms.float32))
    _semi()
    with pytest.raises(DynamicStrategyError, match="multiple of 2"):
        _cell_graph_executor.compile(Head(), Tensor(shape=[Symbol(divisor=2), 16], dtype=ms.float32))


def test_a_call_the_symbol_does_not_admit_is_refused():
    net = Head()
    net.set_inputs(Tensor(shape=[Symbol(divisor=8, max=64), 16], dtype=ms.float32))
    with pytest.raises(InputSignatureError, match=r"input 0's dimension 0 has size 12, which its "
                                                  r"Symbol\(max=64, divisor=8\).*12 is not 8 \* N \+ 0"):
        net(_batch(12))
    with pytest.raises(InputSignatureError, match="72 is above its max 64"):
        net(_batch(72))
    pair, u = Pair(), Symbol(unique=True)
    pair.set_inputs(Tensor(shape=[u, 16], dtype=ms.float32), Tensor(shape=[u, 16], dtype=ms.float32))
    with pytest.raises(InputSignatureError, match="input 1's dimension 0 has size 6 where input 0's dimension 0 "
                                                  "has 4.*one unique"):
        pair(_batch(4), _batch(6))


class LaidOut(nn.Cell):
    def __init__(self, *tensor_map):
        super().__init__()
        layout = Layout((2, 4, 1), ("dp", "mp", "interleaved_parallel"))
        self.gelu = ops.GeLU().shard((layout(*tensor_map),))

    def construct(self, x):
        return self.gelu(x)


def test_a_layout_on_a_dynamic_input_names_one_axis_per_dimension_and_divides_its_symbols():
    _semi()
    x = Tensor(shape=[16, Symbol(divisor=4), 1], dtype=ms.float32)
    _cell_graph_executor.compile(LaidOut("dp", "mp", "None"), x)  # the Symbol's 4 divides mp's split 4
    # MindSpore's CheckLayoutForDynamicShape: no dimension over several axes, no interleaved_parallel
    with pytest.raises(DynamicStrategyError, match=r"dimension 0 over several axes \('dp', 'mp'\)"):
        _cell_graph_executor.compile(LaidOut(("dp", "mp"), "None", "None"), x)
    with pytest.raises(DynamicStrategyError, match="interleaved_parallel"):
        _cell_graph_executor.compile(LaidOut(("dp", "interleaved_parallel"), "None", "None"), x)
    with pytest.raises(DynamicStrategyError, match="multiple of 2, which a split of 4"):
        _cell_graph_executor.compile(LaidOut("dp", "mp", "None"),
                                     Tensor(shape=[16, Symbol(divisor=2), 1], dtype=ms.float32))
