"""``AutoParallel``: MindSpore 2.6's ``mindspore.parallel.auto_parallel.AutoParallel``.

MindSpore 2.6 replaces ``set_auto_parallel_context(parallel_mode=...)`` by wrapping the outermost network or step:
``AutoParallel(train_step, parallel_mode=...)`` for the functional loop, ``Model(AutoParallel(net, ...), ...)`` for
``Model``. Both forms are a Cell, as MindSpore's is:

* a **step function**: calling the wrapper runs the step with its mode in force (``parallel_mode`` and
  ``search_mode`` of the auto-parallel context, restored afterwards), so the step's program (``graphpar.jit``; a
  plain function is compiled as if decorated) is planned and compiled for that mode and no other code sees it;
* a **Cell**: the programs ``Model`` (or a ``TrainOneStepCell``) builds around the wrapped network are built and
  dispatched outside the wrapper's own call, so the wrapper sets the job's auto-parallel context to its mode when
  it is made, and says so once.

MindSpore's configuration methods (``hsdp``, ``pipeline``, ``dataset_strategy``, ``save_param_strategy_file`` ...)
are refused by name (:class:`~graphpar.errors.JitError`) until built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar._logging import notice_once
from graphpar.compile.functional.jit import JitFunction, jit
from graphpar.errors import JitError
from graphpar.nn.cell import Cell
from graphpar.ops.composite import callable_name

# MindSpore 2.6's parallel_mode names -> (parallel_mode, search_mode) of the auto-parallel context
MODES = {"semi_auto": (ParallelMode.SEMI_AUTO_PARALLEL, None),
         "sharding_propagation": (ParallelMode.AUTO_PARALLEL, "sharding_propagation"),
         "recursive_programming": (ParallelMode.AUTO_PARALLEL, "recursive_programming")}

NOT_BUILT = ("hsdp", "pipeline", "dataset_strategy", "save_param_strategy_file", "load_param_strategy_file",
             "load_operator_strategy_file", "save_operator_strategy_file", "comm_fusion",
             "no_init_parameters_in_compile", "enable_gradients_mean", "disable_gradients_mean",
             "disable_gradient_fp32_sync", "disable_loss_repeated_mean", "enable_parallel_optimizer",
             "set_group_ckpt_save_file", "print_local_norm", "dump_local_norm", "enable_device_local_norm",
             "transformer_opt", "set_load_balance", "set_dump_local_norm_path")


def _settings(parallel_mode: str) -> dict[str, str]:
    mode, search = MODES[parallel_mode]
    return {"parallel_mode": mode, "search_mode": search or _context.current_parallel().search_mode}


class _Step:
    """The wrapped step function (static data of the wrapper Cell)."""

    def __init__(self, fn: JitFunction):
        self.fn = fn


class AutoParallel(Cell):
    """``AutoParallel(network, parallel_mode="semi_auto")``: ``network`` (a step function or a Cell) planned in
    ``parallel_mode`` ("semi_auto", "sharding_propagation" or "recursive_programming"); see the module docstring."""

    def __init__(self, network: Callable[..., Any] | Cell, parallel_mode: str = "semi_auto"):
        super().__init__(auto_prefix=False)
        name = callable_name(network)
        if parallel_mode not in MODES:
            raise JitError(name, f"AutoParallel(parallel_mode={parallel_mode!r}); valid: "
                           f"{', '.join(map(repr, MODES))}")
        if not callable(network):
            raise JitError(name, f"AutoParallel wraps a step function or a Cell, got a {type(network).__name__}")
        self.parallel_mode = parallel_mode
        if isinstance(network, Cell):
            self.network = network
            self._step = None
            wanted = _settings(parallel_mode)
            _context.set_auto_parallel_context(**wanted)
            notice_once(f"auto-parallel-cell:{parallel_mode}", f"AutoParallel({name}, parallel_mode="
                        f"{parallel_mode!r}): the programs Model builds around the wrapped Cell are planned outside "
                        f"its call, so graphpar sets the job's parallel_mode={wanted['parallel_mode']!r}, "
                        f"search_mode={wanted['search_mode']!r} now")
        else:
            self._step = _Step(network if isinstance(network, JitFunction) else jit(network))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._step is None:
            return super().__call__(*args, **kwargs)
        with self._mode():
            return self._step.fn(*args, **kwargs)

    def construct(self, *args: Any, **kwargs: Any) -> Any:
        return self.network(*args, **kwargs)

    @contextlib.contextmanager
    def _mode(self) -> Iterator[None]:
        pctx = _context.current_parallel()
        saved = {"parallel_mode": pctx.parallel_mode, "search_mode": pctx.search_mode}
        wanted = _settings(self.parallel_mode)
        if wanted == saved:
            yield
            return
        _context.set_auto_parallel_context(**wanted)
        try:
            yield
        finally:
            _context.set_auto_parallel_context(**saved)


def _refuser(method: str) -> Callable[..., Any]:
    def refuse(self: AutoParallel, *args: Any, **kwargs: Any) -> Any:
        raise JitError(f"AutoParallel.{method}", f"AutoParallel.{method}() is not built yet; the matching "
                       "set_auto_parallel_context setting applies to the wrapped network (see "
                       "docs/porting_from_mindspore.md)")

    refuse.__name__ = method
    return refuse


for _method in NOT_BUILT:
    setattr(AutoParallel, _method, _refuser(_method))
