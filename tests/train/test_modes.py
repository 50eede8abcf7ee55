"""Sink mode equals step-by-step training; PYNATIVE equals GRAPH for the same seed."""

import numpy as np

from .helpers import regression_data, train_steps


def test_sink_equals_non_sink():
    x, y = regression_data(64)
    for mode in ("stand_alone", "data_parallel"):
        a, la = train_steps(mode, x, y, 6)
        b, lb = train_steps(mode, x, y, 6, sink=True)
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(la, lb, rtol=1e-5)


def test_pynative_equals_graph():
    x, y = regression_data(64)
    for mode in ("stand_alone", "data_parallel", "semi_auto_parallel"):
        a, la = train_steps(mode, x, y, 4)
        b, lb = train_steps(mode, x, y, 4, pynative=True)
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(la, lb, rtol=1e-5)
