"""``AutoParallel``: MindSpore 2.6's ``mindspore.parallel.auto_parallel.AutoParallel``.

MindSpore 2.6 replaces ``set_auto_parallel_context(parallel_mode=...)`` by wrapping the outermost network or step:
``AutoParallel(train_step, parallel_mode=...)`` for the functional loop, ``Model(AutoParallel(net, ...), ...)`` for
``Model``. Both forms are a Cell, as MindSpore's is:

* a **step function**: calling the wrapper runs the step with its settings in force (its mode: ``parallel_mode``
  and, for the AUTO modes, ``search_mode``; and what its methods recorded), restored afterwards, so the step's
  program (``graphpar.jit``; a plain function is compiled as if decorated) is planned and compiled for them and no
  other code sees them;
* a **Cell**: the programs ``Model`` (or a ``TrainOneStepCell``) builds around the wrapped network are built and
  dispatched outside the wrapper's own call, so the wrapper sets the job's auto-parallel context to its mode when
  it is made (and to a method's settings when the method is called), and says so once. It is a
  ``nn.pipeline_cell.Forwarding`` Cell: a pipelined train step trains the ``PipelineCell`` inside it.

MindSpore's configuration methods (``hsdp``, ``pipeline``, ``dataset_strategy``, ``save_param_strategy_file`` ...)
record auto-parallel settings (``auto_parallel_config``: what each becomes, or why it is refused) that apply the
same way: for a step function during its call only (``_context.overlaid``, so they are part of the compile key of
the programs compiled in it, and two wrappers of one step with different settings compile different programs); for
a Cell as the job's settings from the method call on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar._logging import notice_once
from graphpar.compile.functional.jit import JitFunction, jit
from graphpar.errors import JitError
from graphpar.nn.cell import Cell
from graphpar.nn.pipeline_cell import Forwarding
from graphpar.ops.composite import callable_name
from graphpar.parallel.auto_parallel_config import Configuration, Overlay

# MindSpore 2.6's parallel_mode names -> the auto-parallel context settings they stand for
MODES = {"semi_auto": {"parallel_mode": ParallelMode.SEMI_AUTO_PARALLEL},
         "sharding_propagation": {"parallel_mode": ParallelMode.AUTO_PARALLEL, "search_mode": "sharding_propagation"},
         "recursive_programming": {"parallel_mode": ParallelMode.AUTO_PARALLEL,
                                   "search_mode": "recursive_programming"}}


class _Step:
    """The wrapped step function (static data of the wrapper Cell)."""

    def __init__(self, fn: JitFunction):
        self.fn = fn


class AutoParallel(Configuration, Forwarding):
    """``AutoParallel(network, parallel_mode="semi_auto")``: ``network`` (a step function or a Cell) planned in
    ``parallel_mode`` ("semi_auto", "sharding_propagation" or "recursive_programming") with the settings its
    configuration methods record; see the module docstring."""

    def __init__(self, network: Callable[..., Any] | Cell, parallel_mode: str = "semi_auto"):
        super().__init__(auto_prefix=False)
        name = callable_name(network)
        if parallel_mode not in MODES:
            raise JitError(name, f"AutoParallel(parallel_mode={parallel_mode!r}); valid: "
                           f"{', '.join(map(repr, MODES))}")
        if not callable(network):
            raise JitError(name, f"AutoParallel wraps a step function or a Cell, got a {type(network).__name__}")
        self.parallel_mode = parallel_mode
        self._step_form = not isinstance(network, Cell)
        self._overlay = Overlay().merged(**MODES[parallel_mode])
        if isinstance(network, Cell):
            self.network = network
            self._step = None
            _context.set_auto_parallel_context(**self._overlay.context)
            notice_once(f"auto-parallel-cell:{parallel_mode}", f"AutoParallel({name}, parallel_mode="
                        f"{parallel_mode!r}): the programs Model builds around the wrapped Cell are planned outside "
                        f"its call, so graphpar sets the job's "
                        f"{', '.join(f'{k}={v!r}' for k, v in self._overlay.context.items())} now")
        else:
            self._step = _Step(network if isinstance(network, JitFunction) else jit(network))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._step is None:
            return super().__call__(*args, **kwargs)
        with _context.overlaid(self._overlay.op_strategy, **self._overlay.context):
            return self._step.fn(*args, **kwargs)

    def construct(self, *args: Any, **kwargs: Any) -> Any:
        return self.network(*args, **kwargs)

    @property
    def forwarded(self) -> Cell | None:
        """The wrapped Cell (None for a step function): a pipelined train step trains the PipelineCell in it."""
        return None if self._step is not None else self.network
