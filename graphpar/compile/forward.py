"""The compiled forward pass (evaluation, prediction, a Cell called at top level in GRAPH_MODE).

Same machinery as the train step without gradients: the network's state is split, the plan places it, and one
``jax.jit`` per input signature runs ``plan.forward``. Updated non-trainable state is discarded (evaluation does not
change statistics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from graphpar import _context
from graphpar._context import PYNATIVE_MODE
from graphpar.compile.choose import choose_plan
from graphpar.compile.state import NetworkState, structure_epoch
from graphpar.errors import DatasetError
from graphpar.nn.cell import Cell


class ForwardProgram:
    def __init__(self, cell: Cell):
        self.cell = cell
        self.pynative = _context.current().mode == PYNATIVE_MODE
        self.plan = choose_plan(cell)
        self._ns: NetworkState | None = None
        self._fns: dict[tuple, Any] = {}
        self.graph = None  # the planned graph of the last call (SEMI/AUTO plans)

    @property
    def state(self) -> NetworkState:
        if self._ns is None or self._ns.epoch != structure_epoch():
            self._ns = NetworkState(self.cell, [])
            self._fns.clear()
        return self._ns

    def _place(self, inputs: Sequence[Any]) -> tuple[list, list]:
        """Inputs placed as the plan wants; a last batch the plan cannot split runs replicated instead."""
        from graphpar.compile.global_batch import gather_process_rows
        from graphpar.compile.program import _global_aval, _put

        shapes = [tuple(_global_aval(x).shape) for x in inputs]
        try:
            self.plan.check_batch(shapes)
            shardings = [self.plan.input_sharding(i, s) for i, s in enumerate(shapes)]
            return shardings, [_put(x, s) for x, s in zip(inputs, shardings)]
        except DatasetError:
            if self.plan.mesh is None:
                shardings = [self.plan.input_sharding(i, ()) for i in range(len(shapes))]
            else:
                shardings = [NamedSharding(self.plan.mesh, PartitionSpec()) for _ in shapes]
            # every process needs the whole batch to replicate it
            rows = [gather_process_rows(np.asarray(x)) for x in inputs]
            return shardings, [jax.device_put(r, s) for r, s in zip(rows, shardings)]

    def _prepared(self, inputs: Sequence[Any]):
        from graphpar.compile.program import _global_aval

        ns = self.state
        self.graph = self.plan.prepare(ns, [_global_aval(x) for x in inputs], "forward")
        shardings, placed = self._place(inputs)
        key = tuple((tuple(np.shape(x)), str(x.dtype)) for x in placed)
        fn = self._fns.get(key)
        if fn is None:
            plan = self.plan

            def forward(rvals, args):
                return plan.forward(ns, ns.params.unflatten([]), ns.rest.unflatten(rvals), args)

            if self.pynative:
                fn, r_sh = forward, None
            else:
                r_sh = [plan.param_sharding(n, tuple(np.shape(v))) if hasattr(plan, "param_sharding")
                        else plan.state_sharding(tuple(np.shape(v))) for n, v in zip(ns.rest.names(), ns.rest.values())]
                fn = jax.jit(forward, in_shardings=(r_sh, shardings))
            self._fns[key] = (fn, r_sh)
        fn, r_sh = self._fns[key]
        values = ns.rest.values()
        if r_sh is not None:
            # the train program may keep parameters in another layout: reshard copies, never the originals
            values = [v if isinstance(v, jax.Array) and v.sharding == s else jax.device_put(v, s)
                      for v, s in zip(values, r_sh)]
        return fn, values, placed

    def __call__(self, *inputs: Any) -> Any:
        fn, values, placed = self._prepared(inputs)
        return fn(values, placed)

    def lower(self, *inputs: Any) -> Any:
        """The ``jax.stages.Lowered`` forward for ``inputs`` (``.compile().as_text()`` shows the collectives)."""
        fn, values, placed = self._prepared(inputs)
        return fn.lower(values, placed)
