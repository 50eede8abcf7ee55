"""``Cell.recompute(**kwargs)``'s settings: MindSpore's keywords validated into a :class:`RecomputeConfig`.

A Cell keeps its config as static data (``Cell.recompute_config``); the trace records it per Cell scope and
``graphpar.compile.lowering.recompute`` evaluates those scopes under ``jax.checkpoint`` with :meth:`policy`. The
config lives here, with the Cell, because it is the Cell's own setting: nn does not reach into the engine to store
it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from flax import nnx

from graphpar.common.parameter import Parameter
from graphpar.errors import CellError
from graphpar.ir import recorder as _recorder
from graphpar.ir.control_flow import for_trace

COMM = "graphpar_mp_comm"  # checkpoint name of model-parallel communication outputs


@dataclass(frozen=True)
class RecomputeConfig:
    """How a Cell (or primitive) is recomputed. Hashable: it lives in the Cell as static data."""

    mp_comm_recompute: bool = True
    parallel_optimizer_comm_recompute: bool = False

    def policy(self) -> Callable[..., Any]:
        if self.mp_comm_recompute:
            return jax.checkpoint_policies.nothing_saveable
        return jax.checkpoint_policies.save_only_these_names(COMM)


def cell_config(cell: Any, kwargs: dict[str, Any]) -> RecomputeConfig:
    """Validate ``Cell.recompute(**kwargs)`` (MindSpore's keywords) into a :class:`RecomputeConfig`."""
    name = type(cell).__name__
    valid = {"mp_comm_recompute", "parallel_optimizer_comm_recompute", "recompute_slice_activation"}
    unknown = set(kwargs) - valid
    if unknown:
        raise CellError(f"{name}.recompute(): unknown option(s) {sorted(unknown)}; valid: {sorted(valid)}")
    for key, value in kwargs.items():
        if not isinstance(value, bool):
            raise CellError(f"{name}.recompute(): {key} must be a bool, got {value!r}")
    if kwargs.get("parallel_optimizer_comm_recompute", False):
        raise CellError(f"{name}.recompute(parallel_optimizer_comm_recompute=True) is not built: graphpar gathers "
                        "sharded parameters once per step outside the Cell; use parallel_optimizer_config="
                        "{'optimizer_level': 'level3'} to re-gather every weight in the backward pass")
    if kwargs.get("recompute_slice_activation", False):
        raise CellError(f"{name}.recompute(recompute_slice_activation=True) is not built (XLA keeps saved "
                        "activations in the layout the plan gives them)")
    return RecomputeConfig(bool(kwargs.get("mp_comm_recompute", True)), False)


def checkpointed(cell: Any, config: RecomputeConfig, kwargs: dict[str, Any], args: tuple) -> Any:
    """``cell.construct(*args, **kwargs)`` under ``jax.checkpoint`` with ``config``'s policy: how a recomputed Cell
    runs inside a gradient taken in ``construct`` (``GradOperation`` in a Cell run as a forward program). JAX traces
    that gradient into the program at once, so the lowering's checkpoint of the Cell's nodes
    (``compile.lowering.recompute``) comes too late: the backward equations already read the forward activations.
    Checkpointed here, the traced backward recomputes the Cell's forward from its inputs (a ``remat`` equation),
    as MindSpore's recompute does.

    The Cell's Variables enter as inputs and are merged into a copy inside the checkpoint (a Variable of the
    caller's trace cannot change inside another); what the copy changed besides Parameters (a Dropout key) is
    written back. Its Tensor attributes that are not Variables stay constants (``if self.keep_prob < 1.0:`` is
    decided while tracing, as everywhere in a compiled step); non-array arguments (Python numbers, None) stay
    static."""
    graphdef, state, constants = nnx.split(cell, nnx.Variable, ...)
    leaves, treedef = jax.tree.flatten(args)
    arrays = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.Array | np.ndarray)]

    def run(state: Any, *values: Any) -> Any:
        full = list(leaves)
        for i, value in zip(arrays, values):
            full[i] = value
        copy = nnx.merge(graphdef, state, constants)
        with _recorder.standing_in(copy):
            out = for_trace(copy.construct)(*jax.tree.unflatten(treedef, full), **kwargs)  # `if`s as in a trace
        return out, nnx.state(copy, lambda _, v: isinstance(v, nnx.Variable) and not isinstance(v, Parameter))

    out, changed = jax.checkpoint(run, policy=config.policy())(state, *(leaves[i] for i in arrays))
    nnx.update(cell, changed)
    return out
