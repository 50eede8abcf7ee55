"""What a step function is made of, found by running it once on abstract inputs.

``capture_step`` evaluates the step with ``jax.eval_shape``: the Variables of every Cell it reaches
(``discover.reachable_cells``) and the optimizers' states are lent to that trace (``objective.lent``), and the
gradient calls it makes (``value_and_grad``, ``grad``, ``GradOperation``) are answered by a recorder
(``ops.composite.StepTrace``), which keeps what was asked and answers with values of the right shapes. The result,
:class:`CapturedStep`, says what the compiled program is: the one differentiated function (the graph that is
planned), which step input each of its arguments is, the one optimizer the step calls, the Cells whose state the
step carries, and the shapes of what the step returns. Nothing is kept of the abstract run: the Parameters and the
optimizer's state are as before.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from graphpar.common.deferred import Deferred
from graphpar.compile.functional.discover import reachable_state
from graphpar.compile.functional.objective import lent, lent_optimizer_state, read, variables_of
from graphpar.errors import JitError, user_traceback
from graphpar.ir.control_flow import for_trace
from graphpar.nn.cell import Cell
from graphpar.nn.optim.optimizer import Optimizer
from graphpar.nn.pipeline_cell import PipelineCell, pipeline_cell_of
from graphpar.ops.composite import Differentiation, tracing_step


@dataclass(frozen=True)
class CapturedStep:
    """A step function's parts (see the module docstring). ``spec`` is None for a function that takes no
    gradient (and ``problem`` None: it runs as written) or that is not a step graphpar compiles (``problem`` says
    why: ``graphpar.jit`` raises it, a training Cell's call runs as written); ``inputs_of_graph[k]`` is the index of the step input passed as argument ``k`` of the gradient call
    (None: a value computed in the step); ``aux_avals``: the auxiliary outputs of a ``has_aux`` function (shapes)."""

    fn: Callable[..., Any]
    name: str
    cells: tuple[Cell, ...]
    loose: tuple[Any, ...]
    optimizers: tuple[Optimizer, ...]
    spec: Differentiation | None
    optimizer: Optimizer | None
    graph_avals: tuple[jax.ShapeDtypeStruct, ...]
    inputs_of_graph: tuple[int | None, ...]
    aux_avals: tuple
    out_avals: Any
    problem: str | None = None  # why the function is not a step graphpar compiles (JitError's message)
    bindings: tuple = ()  # the names resolved to find the state (discover.bindings_hold)
    pipeline: PipelineCall | None = None  # the PipelineCell the differentiated function calls (None: none)


@dataclass(frozen=True)
class PipelineCall:
    """The ``nn.PipelineCell`` (or a Cell forwarding to one: ``AutoParallel(pipeline_net)``) that the
    differentiated function calls. A pipelined step (``pipeline_stages > 1``) answers the gradient call with that
    Cell's pipeline, which is exact only when the function returns the Cell's loss as it is, called on the
    gradient call's own arguments: ``problem`` says otherwise (None: it does)."""

    cell: Cell
    problem: str | None


class _Recorder:
    """The :class:`~graphpar.ops.composite.StepTrace` of the abstract run: it records each gradient call and
    answers with the function's own outputs and zero gradients of the right shapes."""

    def __init__(self) -> None:
        self.calls: list[tuple[Differentiation, tuple]] = []
        self.inputs: tuple = ()
        self.aux: tuple = ()
        self.pipeline: PipelineCall | None = None
        self._pipeline_calls: list[tuple[Cell, tuple, dict, Any]] | None = None  # while differentiating

    def differentiate(self, spec: Differentiation, args: tuple, sens: Any) -> tuple[Any, tuple, tuple]:
        self.calls.append((spec, args))
        self._pipeline_calls = []
        try:
            value = for_trace(spec.fn)(*args)  # the differentiated function: its `if`s compiled as the step's
            self.pipeline = _pipeline_call(spec, args, value, self._pipeline_calls)
        finally:
            self._pipeline_calls = None
        if spec.has_aux:
            if not isinstance(value, (tuple, list)) or not value:
                raise JitError(spec.name, f"{spec.origin}(..., has_aux=True): the function returns a "
                               f"{type(value).__name__}; with has_aux it returns (loss, *aux)")
            self.aux = jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)),
                                    tuple(value[1:]))
        g_w = tuple(jnp.zeros(jnp.shape(w.get_value()), jnp.result_type(w.get_value())) for w in spec.weights)
        g_x = tuple(jnp.zeros_like(args[p]) for p in spec.positions)
        return value, g_w, g_x

    def computes(self, cell: Any, args: tuple, kwargs: dict) -> bool:
        """A PipelineCell called by the differentiated function is called here (as written) to see what it is
        given and what it returns; every other Cell runs as written."""
        calls = self._pipeline_calls
        return calls is not None and isinstance(pipeline_cell_of(cell), PipelineCell)

    def forward(self, cell: Any, args: tuple, kwargs: dict) -> Any:
        calls = self._pipeline_calls
        self._pipeline_calls = None  # the call itself runs as written
        try:
            out = cell(*args, **kwargs)
        finally:
            self._pipeline_calls = calls
        calls.append((cell, args, kwargs, out))
        return out



def _all_optimizers(cells: Sequence[Cell]) -> list[Optimizer]:
    found: dict[int, Optimizer] = {}
    for cell in cells:
        for _, sub in cell.cells_and_names():
            if isinstance(sub, Optimizer):
                found.setdefault(id(sub), sub)
    return list(found.values())


def capture_step(fn: Callable[..., Any], name: str, avals: Sequence[jax.ShapeDtypeStruct]) -> CapturedStep:
    """Run ``fn`` on ``avals`` abstractly and say what it is made of (see the module docstring)."""
    cells, loose, bindings = reachable_state(fn)
    optimizers = _all_optimizers(cells)
    variables = variables_of(cells, loose)
    recorder = _Recorder()
    before = [opt._box.state for opt in optimizers]
    after: list[Any] = []

    values = read(variables)
    # a Parameter made under no_init_parameters() holds its shape only (Deferred): an abstract input of the run
    undrawn = [i for i, v in enumerate(values) if isinstance(v, Deferred)]

    def run(drawn: list[Any], *xs: Any) -> Any:
        recorder.inputs = xs
        held = list(values)
        for i, x in zip(undrawn, drawn):
            held[i] = x
        with lent(variables, held), lent_optimizer_state(optimizers, before), tracing_step(recorder):
            out = fn(*xs)
            after.extend(opt._box.state for opt in optimizers)
        return out

    try:
        out_avals = jax.eval_shape(run, [values[i] for i in undrawn], *avals)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError) as exc:
        raise control_flow_error(name, exc) from None
    called = [opt for opt, old, new in zip(optimizers, before, after) if new is not old]
    parts = (fn, name, tuple(cells), tuple(loose), tuple(optimizers))
    found = tuple(bindings)

    def refused(problem: str) -> CapturedStep:
        return CapturedStep(*parts, None, None, (), (), (), out_avals, problem, found)

    if not recorder.calls:
        if called:
            return refused(f"the step calls {type(called[0]).__name__} without taking a gradient (value_and_grad, "
                           "grad, GradOperation) in the step; take the gradients inside it")
        return CapturedStep(*parts, None, None, (), (), (), out_avals, None, found)
    if len(recorder.calls) > 1:
        names = ", ".join(f"{s.origin} of '{s.name}'" for s, _ in recorder.calls)
        return refused(f"the step takes {len(recorder.calls)} gradients ({names}); a compiled step plans one "
                       "differentiated function: compute the loss in one function and differentiate it once")
    spec, args = recorder.calls[0]
    if len(called) != 1:
        what = "no optimizer" if not called else f"{len(called)} optimizers"
        return refused(f"the step calls {what}; a compiled step applies its gradients with one nn.Optimizer call "
                       "(optimizer(grads)) on the Parameters it differentiates")
    optimizer = called[0]
    owned = {id(p) for p in optimizer.parameters}
    stray = [w.name for w in spec.weights if id(w) not in owned]
    if stray:
        return refused(f"{spec.origin} of '{spec.name}' differentiates Parameter(s) {stray[:4]} that "
                       f"{type(optimizer).__name__} does not update; differentiate the optimizer's parameters "
                       "(optimizer.parameters or net.trainable_params())")
    graph_avals, inputs_of_graph = [], []
    for k, arg in enumerate(args):
        if not isinstance(arg, jax.Array):
            return refused(f"argument {k} of {spec.origin} of '{spec.name}' is a {type(arg).__name__}; a compiled "
                           "step passes Tensors to the differentiated function (make it a constant inside the "
                           "function instead)")
        graph_avals.append(jax.ShapeDtypeStruct(arg.shape, arg.dtype))
        inputs_of_graph.append(next((i for i, x in enumerate(recorder.inputs) if x is arg), None))
    return CapturedStep(*parts, spec, optimizer, tuple(graph_avals), tuple(inputs_of_graph), recorder.aux,
                        out_avals, None, found, recorder.pipeline)


def _pipeline_call(spec: Differentiation, args: tuple, value: Any,
                   calls: list[tuple[Cell, tuple, dict, Any]]) -> PipelineCall | None:
    """What the differentiated function did with the PipelineCells it called (see :class:`PipelineCall`)."""
    if not calls:
        return None
    cell, given, kwargs, out = calls[0]
    what = f"{spec.origin} of '{spec.name}'"
    problem = None
    if len(calls) > 1:
        problem = (f"{what} calls a PipelineCell {len(calls)} times; a pipelined step runs the PipelineCell once "
                   "per step")
    elif kwargs or len(given) != len(args) or any(a is not b for a, b in zip(given, args)):
        problem = (f"{what} calls {type(cell).__name__} on other values than its own arguments; call it on them "
                   "as they are (def forward_fn(*inputs): return net_with_loss(*inputs))")
    elif spec.has_aux:
        problem = (f"{what} with has_aux=True: the pipelined step computes the PipelineCell's loss only; "
                   "differentiate a function returning that loss (has_aux=False)")
    elif value is not out:
        problem = (f"{what} returns something other than {type(cell).__name__}'s loss; the pipelined step "
                   "differentiates that loss as it is (def forward_fn(*inputs): return net_with_loss(*inputs))")
    elif spec.positions:
        problem = (f"{what} differentiates the inputs (grad_position={spec.positions}); a pipelined step takes the "
                   "gradients of the weights only (grad_position=None)")
    return PipelineCall(cell, problem)


def control_flow_error(name: str, exc: BaseException) -> JitError:
    """The :class:`JitError` for Python control flow on a traced value that graphpar did not compile, naming the
    user's line: ``bool()``/``int()``/``float()`` of a traced value, or an ``if`` in code the rewrite does not reach
    (the step, the functions of the user's own code it calls and every Cell's ``construct`` have their ``if``s on
    traced values compiled, ``ir.control_flow``; a lambda, code without source and library functions are traced as
    Python)."""
    tb = user_traceback(exc.__traceback__)
    where, text = "", ""
    while tb is not None:
        frame = tb.tb_frame
        where = f"{frame.f_code.co_filename}:{tb.tb_lineno}"
        text = linecache.getline(frame.f_code.co_filename, tb.tb_lineno).strip()
        tb = tb.tb_next
    at = f" at {where} (`{text}`)" if where else ""
    return JitError(name, f"Python control flow on a traced value{at}: a compiled step is traced once for all data, "
                    "so bool()/int()/float() of a Tensor cannot depend on its value. graphpar compiles an `if` on a "
                    "Tensor in Python source it can rewrite (the step, the functions and methods of your own code "
                    "it calls, every Cell's construct; not a lambda, code typed at a prompt or a library's "
                    "function): write the `if` there, or choose values with ops.Select()(cond, a, b)")
