"""``no_init_parameters()``: build a network whose parameters are drawn where they live, not on the host.

MindSpore's context manager marks the Parameters created inside it ``init_param=False``: nothing is drawn until a
checkpoint load replaces them, ``net.init_parameters_data()`` or the network's first execution. graphpar does the
same with a ``Deferred`` value (``graphpar.common.deferred``): ``initializer(...)`` inside returns the shape, dtype
and draw of the value, with its key taken now; tracing and planning read the shape; the first compiled step draws
every deferred Parameter in one program whose outputs lie in the planned layouts, so each device computes its own
block only — the values an eager draw with the same seed gives. A model larger than one host's memory can be built,
planned (``graphpar plan``) and started.

As in MindSpore, only values made by ``initializer`` (or ``Tensor(shape=..., dtype=..., init=...)``) are deferred:
a Parameter made from a Tensor or a numpy array already holds its data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from graphpar.common.deferred import deferred_init


@contextlib.contextmanager
def no_init_parameters() -> Iterator[None]:
    """Parameters created inside hold no data until their program's first compile (or ``init_data()``,
    ``Cell.init_parameters_data()``, ``set_data``, a checkpoint load).

    Example::

        with no_init_parameters():
            net = Net()                # nothing drawn
        model.train(1, dataset)        # each device draws its own block of each parameter
    """
    with deferred_init():
        yield
