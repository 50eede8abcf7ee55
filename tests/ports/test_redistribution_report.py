"""The redistribution report groups the repeated layers of a deep network into one line per pattern.

MindSpore logs each inserted redistribution at DEBUG and warns "Inconsistency occurred at edge" only where sharding
propagation found no free strategy; graphpar prints one line per pattern (WARNING in that case, else INFO) and keeps
every edge at DEBUG and in ``graph.plan.redistributions``.
"""

import logging

import numpy as np

import graphpar as ms
from graphpar import nn


class Deep(nn.Cell):
    """The planning benchmark's MLP: the first matmul hinted, the rest propagated."""

    def __init__(self, layers: int, width: int = 16):
        super().__init__()
        cells = [nn.Dense(width, width, activation="relu") for _ in range(layers)]
        cells[0].matmul.shard(((2, 1), (4, 1)))
        self.body = nn.SequentialCell(cells)

    def construct(self, x):
        return self.body(x)


def _plan(layers: int):
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    net = Deep(layers)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    x = np.ones((16, 16), np.float32)
    return train.program.planned([x, x]).graph


def _lines(notices, level=None):
    return [r for r in notices.records if "redistribution inserted" in r.getMessage()
            and (level is None or r.levelno == level)]


def test_repeated_layers_are_one_line_with_count_and_scopes(notices):
    graph = _plan(6)
    shown = _lines(notices)
    edges = graph.plan.redistributions
    assert len(edges) > len(shown), (len(edges), [r.getMessage() for r in shown])
    # every priced edge is in exactly one shown line: the counts add up to the per-edge records
    counted = 0
    for r in shown:
        text = r.getMessage()
        counted += int(text.split(" edges ")[0].rsplit(" ", 1)[1]) if " edges " in text else 1
    assert counted == len(edges)
    grouped = [r.getMessage() for r in shown if " edges " in r.getMessage()]
    assert len(grouped) == 1, grouped
    line = grouped[0]
    assert "5 edges 'matmul' -> 'bias_add' input 0" in line, line
    assert "body-SequentialCell/1-Dense ... " in line and line.split(" ... ")[1].split(")")[0].endswith("5-Dense")
    each = next(e["bytes"] for e in edges if graph.nodes[e["node"]].instance_name == "bias_add")
    assert f"{each:g} B per device per step each" in line and f"{5 * each:g} B in all" in line
    # propagation chose bias_add's strategy at no cost (its forward is a slice, free as MindSpore's propagation
    # counts it; the backward gather is what costs): MindSpore says nothing above DEBUG, so INFO
    assert next(r for r in shown if " edges " in r.getMessage()).levelno == logging.INFO
    # the user-hinted first matmul's input edge (no propagation on either end) is INFO too
    first = [r for r in shown if "-> 'matmul' input 0" in r.getMessage()]
    assert first and all(r.levelno == logging.INFO for r in first)
    # the loss's Sub: propagation found no free strategy (MindSpore's "Inconsistency occurred at edge"): WARNING
    sub = graph.find("sub")[0]
    assert sub.provenance.kind == "propagated" and sub.provenance.cost > 0
    warned = [r.getMessage() for r in shown if r.levelno == logging.WARNING]
    assert warned and all("-> 'sub'" in m for m in warned), warned


def test_every_edge_is_logged_at_debug(notices):
    notices.set_level(logging.DEBUG, logger="graphpar")
    graph = _plan(4)
    debug = [r.getMessage() for r in _lines(notices, logging.DEBUG)]
    assert len(debug) == len(graph.plan.redistributions)
    scopes = sorted(m.split("(scope ")[1].split(")")[0] for m in debug if "-> 'bias_add'" in m)
    assert [s.rsplit("/", 1)[1] for s in scopes] == ["1-Dense", "2-Dense", "3-Dense"]


def test_distinct_patterns_stay_separate(notices):
    """Layers of two widths: the same op pair, two tensor shapes, two lines."""

    class TwoWidths(nn.Cell):
        def __init__(self):
            super().__init__()
            cells = [nn.Dense(16, 16, activation="relu") for _ in range(3)]
            cells += [nn.Dense(16, 32, activation="relu")] + [nn.Dense(32, 32, activation="relu") for _ in range(3)]
            cells[0].matmul.shard(((2, 1), (4, 1)))
            self.body = nn.SequentialCell(cells)

        def construct(self, x):
            return self.body(x)

    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    net = TwoWidths()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    train.program.planned([np.ones((16, 16), np.float32), np.ones((16, 32), np.float32)])
    bias = [r.getMessage() for r in _lines(notices) if "-> 'bias_add' input 0" in r.getMessage()]
    shapes = sorted(m.split("tensor ")[1].split(" from")[0] for m in bias)
    assert shapes == ["(16, 16)", "(16, 32)"], bias
