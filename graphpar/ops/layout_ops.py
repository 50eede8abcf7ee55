"""Layout constraints in ``construct``: MindSpore 2.x's ``reshard(tensor, layout)`` and the in/out layouts of
``shard(fn, in_strategy, out_strategy)``.

Both are the op :class:`Reshard`: an identity whose ``shard()`` hint is the wanted layout (a ``Layout`` called with
its tensor map, or a strategy tuple for one tensor). In the graph IR it is an op node like any other: the planner
reads its hint with the user's other hints (provenance "user"; propagation continues from it), the edge into it
carries the redistribution, and the lowering pins its input and output with ``with_sharding_constraint``, so XLA
inserts exactly the collective that moves the value into the layout. Outside a parallel trace it returns its input.
"""

from __future__ import annotations

from typing import Any

from graphpar.ops.primitive import Primitive
from graphpar.planner.layout import Layout


class Reshard(Primitive):
    """The value, pinned to ``layout`` (a called :class:`~graphpar.planner.layout.Layout`, or a tuple of ints: one
    split per dimension)."""

    input_names = ("x",)

    def __init__(self, layout: Any):
        super().__init__()
        if isinstance(layout, Layout):
            self.shard((layout,))
        elif isinstance(layout, tuple) and all(isinstance(d, int) and not isinstance(d, bool) for d in layout):
            self.shard((layout,))
        else:
            raise TypeError(f"reshard(tensor, layout): layout must be a Layout called with its tensor map (or a "
                            f"tuple of ints), got {type(layout).__name__}; e.g. reshard(x, Layout((2, 4), ('dp', "
                            "'mp'))('dp', 'None'))")

    def compute(self, x):
        return x


def reshard(tensor: Any, layout: Any) -> Any:
    """MindSpore's ``mindspore.parallel.function.reshard``: ``tensor`` in ``layout`` from here on (an identity)."""
    return Reshard(layout).set_prim_instance_name("reshard")(tensor)
