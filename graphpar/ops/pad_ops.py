"""``PadV3``: MindSpore's N-d pad with constant, reflect, edge and circular modes (``graphpar.planner.rules.
index_rules`` holds its sharding rule: padded dimensions stay whole)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from graphpar.errors import StrategyError
from graphpar.ops.primitive import Primitive
from graphpar.planner.layout import is_layout_strategy

_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "circular": "wrap"}


def pad_widths(paddings: tuple[int, ...], rank: int, contiguous: bool) -> tuple[tuple[int, int], ...]:
    """MindSpore's ``paddings`` (pairs for the last dimension first) as ``(before, after)`` per dimension."""
    k = len(paddings) // 2
    if len(paddings) % 2 or k > rank:
        raise ValueError(f"PadV3: paddings must hold 2 * k entries with k <= the input's rank {rank}, got "
                         f"{paddings}")
    pairs = ([(paddings[2 * i], paddings[2 * i + 1]) for i in range(k)] if contiguous
             else [(paddings[i], paddings[k + i]) for i in range(k)])
    widths = [(0, 0)] * rank
    for i, pair in enumerate(pairs):
        widths[rank - 1 - i] = pair
    return tuple(widths)


class PadV3(Primitive):
    """``PadV3(mode='constant', paddings_contiguous=True)(x, paddings, value=None)``.

    ``paddings`` (a tuple or numpy array of ``2 * k`` ints, known when the network is compiled) pads the last
    ``k`` dimensions, the last one first: ``[before_last, after_last, before_second_last, ...]``
    (``paddings_contiguous=False``: all befores, then all afters); negative entries crop in ``constant`` mode.
    ``value`` (default 0) fills in ``constant`` mode.

    MindSpore writes the strategy as ``(x's splits, (1,), ())``: paddings' entry (which cannot split) is checked
    and dropped when the strategy is given; the planner sees ``x`` and ``value``.
    """

    input_names = ("x", "value")
    optional_inputs = 1

    def __init__(self, mode: str = "constant", paddings_contiguous: bool = True):
        if mode not in _MODES:
            raise ValueError(f"PadV3(mode): mode must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")
        super().__init__(mode=mode, paddings_contiguous=bool(paddings_contiguous))

    def _tensor_arg_indices(self):
        return (0, 2)  # paddings (argument 1) is a constant

    def shard(self, in_strategy: Any = None, out_strategy: Any = None) -> "PadV3":
        if isinstance(in_strategy, tuple) and len(in_strategy) == 3 and not is_layout_strategy(in_strategy):
            entry = in_strategy[1]
            if not isinstance(entry, tuple) or any(s != 1 for s in entry):
                raise StrategyError(self.name, in_strategy, f"paddings' entry {entry!r} must be all 1 (paddings are "
                                    "constants and cannot be split)", hint="Write (x's splits, (1,), ()), e.g. "
                                    "((2, 4, 1), (1,), ())")
            in_strategy = (in_strategy[0], in_strategy[2])
        return super().shard(in_strategy, out_strategy)

    def __call__(self, x, paddings, value=None):
        if isinstance(paddings, jax.core.Tracer):
            raise ValueError(f"PadV3 '{self.instance_name}': paddings must be known when the network is compiled "
                             "(the output's shape depends on them): give a tuple or a numpy array; a Tensor held by "
                             "a Cell is network state in graphpar and is traced")
        paddings = tuple(int(p) for p in np.asarray(paddings).reshape(-1))
        if value is None:
            return super().__call__(x, paddings)
        return super().__call__(x, paddings, value)

    def compute(self, x, paddings, value=None):
        widths = pad_widths(tuple(paddings), jnp.ndim(x), self.attrs["paddings_contiguous"])
        mode = self.attrs["mode"]
        if mode != "constant":
            if value is not None:
                raise ValueError(f"PadV3 '{self.instance_name}': value is only used in 'constant' mode")
            return jnp.pad(x, widths, mode=_MODES[mode])
        fill = jnp.asarray(0 if value is None else value, jnp.result_type(x))
        return lax.pad(x, fill, tuple((lo, hi, 0) for lo, hi in widths))
