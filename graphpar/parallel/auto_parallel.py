"""``AutoParallel``: MindSpore 2.6's ``mindspore.parallel.auto_parallel.AutoParallel`` for a step function.

MindSpore 2.6 replaces ``set_auto_parallel_context(parallel_mode=...)`` by wrapping the outermost step in
``AutoParallel(train_step, parallel_mode=...)``: the wrapped step is planned in that mode, whatever the global context
says. Here calling the wrapper runs the step with its mode in force (``parallel_mode`` and ``search_mode`` of the
auto-parallel context, restored afterwards), so the step's program (``graphpar.jit``; a plain function is compiled
as if decorated) is planned and compiled for it; each mode's program is kept as the context's other settings' are.

Built: the constructor and the call. MindSpore's configuration methods (``hsdp``, ``pipeline``,
``dataset_strategy``, ``save_param_strategy_file`` ...) are refused by name until built, and so is wrapping a Cell
(``Model(AutoParallel(net))``): its programs are built by ``Model`` outside the wrapper's call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar.compile.functional.jit import JitFunction, jit
from graphpar.errors import JitError
from graphpar.nn.cell import Cell

# MindSpore 2.6's parallel_mode names -> (parallel_mode, search_mode) of the auto-parallel context
MODES = {"semi_auto": (ParallelMode.SEMI_AUTO_PARALLEL, None),
         "sharding_propagation": (ParallelMode.AUTO_PARALLEL, "sharding_propagation"),
         "recursive_programming": (ParallelMode.AUTO_PARALLEL, "recursive_programming")}

_NOT_BUILT = ("hsdp", "pipeline", "dataset_strategy", "save_param_strategy_file", "load_param_strategy_file",
              "load_operator_strategy_file", "save_operator_strategy_file", "comm_fusion", "no_init_parameters_in_compile",
              "enable_gradients_mean", "disable_gradients_mean", "disable_gradient_fp32_sync", "disable_loss_repeated_mean",
              "enable_parallel_optimizer", "set_group_ckpt_save_file", "print_local_norm", "dump_local_norm",
              "enable_device_local_norm", "transformer_opt", "set_load_balance", "set_dump_local_norm_path")


class AutoParallel:
    """``AutoParallel(network, parallel_mode="semi_auto")``: ``network`` (a step function) runs planned in
    ``parallel_mode`` ("semi_auto", "sharding_propagation" or "recursive_programming") when the wrapper is called."""

    def __init__(self, network: Callable[..., Any], parallel_mode: str = "semi_auto"):
        name = getattr(network, "__qualname__", type(network).__name__)
        if parallel_mode not in MODES:
            raise JitError(name, f"AutoParallel(parallel_mode={parallel_mode!r}); valid: "
                           f"{', '.join(map(repr, MODES))}")
        if isinstance(network, Cell):
            raise JitError(name, "AutoParallel of a Cell (Model(AutoParallel(net)), a Cell called through the "
                           "wrapper) is not built yet: for Model.train set set_auto_parallel_context("
                           f"parallel_mode={MODES[parallel_mode][0]!r}); for the functional loop wrap the step "
                           "function")
        if not callable(network):
            raise JitError(name, f"AutoParallel wraps a step function, got a {type(network).__name__}")
        self.network = network if isinstance(network, JitFunction) else jit(network)
        self.parallel_mode = parallel_mode

    def __call__(self, *args: Any) -> Any:
        with self._mode():
            return self.network(*args)

    @contextlib.contextmanager
    def _mode(self) -> Iterator[None]:
        mode, search = MODES[self.parallel_mode]
        pctx = _context.current_parallel()
        saved = {"parallel_mode": pctx.parallel_mode, "search_mode": pctx.search_mode}
        wanted = {"parallel_mode": mode, "search_mode": search or pctx.search_mode}
        if wanted == saved:
            yield
            return
        _context.set_auto_parallel_context(**wanted)
        try:
            yield
        finally:
            _context.set_auto_parallel_context(**saved)

    def __getattr__(self, name: str) -> Any:
        if name in _NOT_BUILT:
            raise JitError(f"AutoParallel.{name}", f"AutoParallel.{name}() is not built yet; the matching "
                           "set_auto_parallel_context setting applies to the wrapped step (see "
                           "docs/porting_from_mindspore.md)")
        raise AttributeError(f"'AutoParallel' object has no attribute {name!r}")
