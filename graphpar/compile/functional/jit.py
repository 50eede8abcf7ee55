"""``graphpar.jit``: MindSpore's ``mindspore.jit``, compiling a training step function into one planned program.

Both generations of MindSpore's signature are read: 2.6's ``jit(function, *, capture_mode, jit_level, dynamic,
fullgraph, backend, **options)`` and 2.0-2.5's ``jit(fn, mode, input_signature, hash_args, jit_config,
compile_once)``; each argument is built, or refused by name (:class:`~graphpar.errors.JitError`), or said once to
be what graphpar does anyway (XLA's compiler has one optimisation pipeline, and graphpar captures a function by
tracing it).

A call of the decorated function with new input shapes captures it (``functional.capture``): a step that takes one
gradient and applies it with one optimizer becomes a :class:`~graphpar.compile.functional.program.FunctionalProgram`
(``Model.train``'s program, planned for the settings in force; with ``pipeline_stages > 1`` a
:class:`~graphpar.compile.functional.pipelined.PipelinedStep` on ``Model.train``'s pipelined step, one per settings,
as ``TrainOneStepCell`` builds its pipelined program); a function that takes no gradient runs as written
(its Cell calls are compiled one by one in GRAPH_MODE), said once. A call made inside another trace (a decorated
function called by a Cell's ``construct``) runs inline. The method form (``@jit`` on a method) binds per object.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from graphpar import _context
from graphpar._logging import notice_once
from graphpar.compile.functional.capture import CapturedStep, capture_step
from graphpar.compile.functional.per_rank import PerRankRun, per_rank_function, wants_per_rank_function
from graphpar.compile.functional.pipelined import PipelinedStep
from graphpar.compile.functional.program import FunctionalProgram
from graphpar.compile.runtime.placement import global_aval
from graphpar.errors import JitError
from graphpar.ir.control_flow import for_trace
from graphpar.ir.free_variables import bindings_hold
from graphpar.nn.cell import Cell
from graphpar.nn.pipeline_cell import wants_pipeline
from graphpar.ops.composite import callable_name

CAPTURE_MODES = ("ast", "bytecode", "trace")
LEGACY_MODES = ("PSJit", "PIJit")
JIT_LEVELS = ("O0", "O1", "O2")
BACKENDS = ("", "ms_backend")


class JitConfig:
    """MindSpore's ``JitConfig(jit_level="", exc_mode="auto", jit_syntax_level="", debug_level="RELEASE",
    infer_boost="off")``: ``jit_level`` is read as ``jit``'s; the others say once what graphpar does (XLA runs the
    whole program on the device, graphpar traces Python, errors name the user's line in every mode). Unknown keys are
    refused by name."""

    _VALID = {"exc_mode": ("auto", "sink", "no_sink"), "jit_syntax_level": ("", "STRICT", "COMPATIBLE", "LAX"),
              "debug_level": ("RELEASE", "DEBUG"), "infer_boost": ("on", "off")}

    def __init__(self, jit_level: str = "", exc_mode: str = "auto", jit_syntax_level: str = "",
                 debug_level: str = "RELEASE", infer_boost: str = "off", **kwargs: Any):
        for key in kwargs:
            raise JitError("JitConfig", f"unknown option {key!r}; valid: jit_level, "
                           f"{', '.join(self._VALID)}")
        if jit_level not in ("",) + JIT_LEVELS:
            raise JitError("JitConfig", f"jit_level={jit_level!r}; valid: '', {', '.join(map(repr, JIT_LEVELS))}")
        given = {"exc_mode": exc_mode, "jit_syntax_level": jit_syntax_level, "debug_level": debug_level,
                 "infer_boost": infer_boost}
        for key, value in given.items():
            if value not in self._VALID[key]:
                raise JitError("JitConfig", f"{key}={value!r}; valid: {', '.join(map(repr, self._VALID[key]))}")
        self.jit_level = jit_level
        self.jit_config_dict = dict(given, jit_level=jit_level)
        defaults = {"exc_mode": "auto", "jit_syntax_level": "", "debug_level": "RELEASE", "infer_boost": "off"}
        changed = [f"{k}={v!r}" for k, v in given.items() if v != defaults[k]]
        if changed:
            notice_once(f"jit-config:{changed}", f"JitConfig({', '.join(changed)}): graphpar compiles the whole "
                        "step with XLA and runs it on the devices in every configuration; these options change "
                        "nothing")


@dataclass(frozen=True)
class JitOptions:
    """A ``jit`` call's arguments, checked (see :func:`jit`)."""

    input_signature: tuple[jax.ShapeDtypeStruct, ...] | None = None
    hash_args: tuple[Any, ...] = ()


def _as_signature(name: str, value: Any) -> tuple[jax.ShapeDtypeStruct, ...] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        raise JitError(name, "input_signature as a dict (MindSpore's incremental form) is not built; give a "
                       "Tensor or a tuple of Tensors, one per input")
    items = value if isinstance(value, (list, tuple)) else (value,)
    for i, x in enumerate(items):
        if not isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray)):
            raise JitError(name, f"input_signature item {i} is a {type(x).__name__}; give Tensors (or "
                           "jax.ShapeDtypeStruct) with each input's shape and dtype")
    return tuple(jax.ShapeDtypeStruct(tuple(np.shape(x)), x.dtype) for x in items)


def _check_options(name: str, capture_mode: str, jit_level: str, dynamic: int, fullgraph: bool, backend: str,
                   mode: str, jit_config: Any, compile_once: bool, options: dict) -> None:
    """Refuse what is not built, by name; say once what graphpar does instead for what changes nothing."""
    for key in options:
        raise JitError(name, f"backend option {key!r} has no XLA equivalent; graphpar's jit takes capture_mode, "
                       "jit_level, dynamic, fullgraph, backend ('' or 'ms_backend'), input_signature, hash_args, "
                       "jit_config")
    if capture_mode not in CAPTURE_MODES:
        raise JitError(name, f"capture_mode={capture_mode!r}; valid: {', '.join(map(repr, CAPTURE_MODES))}")
    if mode not in LEGACY_MODES:
        raise JitError(name, f"mode={mode!r}; valid: {', '.join(map(repr, LEGACY_MODES))}")
    if capture_mode == "bytecode" or mode == "PIJit":
        notice_once("jit-bytecode", f"jit({name}): graphpar captures every jit function by tracing its execution "
                    "(capture_mode='trace'); Python control flow that depends on a Tensor's value is not captured")
    if jit_config is not None and not isinstance(jit_config, JitConfig):
        raise JitError(name, f"jit_config is a {type(jit_config).__name__}; give a graphpar.JitConfig")
    level = jit_config.jit_level if jit_config is not None and jit_config.jit_level else jit_level
    if level not in JIT_LEVELS:
        raise JitError(name, f"jit_level={level!r}; valid: {', '.join(map(repr, JIT_LEVELS))}")
    if level != "O0":
        notice_once("jit-level", f"jit({name}): jit_level={level!r}: XLA applies its own optimisation pipeline "
                    "(fusion included) at every level")
    if dynamic not in (0, 1) or isinstance(dynamic, bool):
        raise JitError(name, f"dynamic={dynamic!r}; valid: 0, 1")
    if dynamic == 1:
        notice_once("jit-dynamic", f"jit({name}, dynamic=1): XLA compiles static shapes; each new input shape "
                    "compiles its own program (the first call with it pays the compile)")
    if not isinstance(fullgraph, bool):
        raise JitError(name, f"fullgraph={fullgraph!r}; valid: True, False")
    if backend == "GE":
        raise JitError(name, "backend='GE' (Ascend's GraphEngine) is not available: graphpar compiles with XLA; "
                       "leave backend unset or give 'ms_backend'")
    if backend not in BACKENDS:
        raise JitError(name, f"backend={backend!r}; valid: '', 'ms_backend'")
    if compile_once:
        raise JitError(name, "compile_once=True is not built: graphpar compiles once per decorated function; "
                       "decorate the function once (at module level) rather than re-creating it")


@dataclass(frozen=True)
class _Entry:
    captured: CapturedStep | None  # None: a per-rank function, run as written (not captured)
    program: FunctionalProgram | PipelinedStep | None
    per_rank: PerRankRun | None = None  # STAND_ALONE manual parallel: the function once per rank

    @property
    def bindings(self) -> Sequence[tuple[Any, Any, Any]]:
        """The names resolved to find the state (``free_variables.bindings_hold``)."""
        return self.captured.bindings if self.captured is not None else self.per_rank.bindings


class JitFunction:
    """A function decorated with :func:`jit` (see the module docstring). ``programs`` holds one entry per input
    signature (and ``hash_args`` value): what was captured and the compiled step (None: the function runs as
    written), captured again when a name it resolved is rebound (``free_variables.bindings_hold``)."""

    def __init__(self, fn: Callable[..., Any], options: JitOptions, strict: bool = True):
        self.fn = fn
        self.options = options
        self.strict = strict  # False: a function that is not a step graphpar compiles runs as written
        self.__qualname__ = callable_name(fn)
        self.__name__ = self.__qualname__.rsplit(".", 1)[-1]
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.programs: dict[tuple, _Entry] = {}
        self._bound: dict[int, tuple[Any, JitFunction]] = {}

    def __get__(self, instance: Any, owner: type | None = None) -> "JitFunction":
        """The method form: one compiled function per object (its Cells are the object's)."""
        if instance is None:
            return self
        found = self._bound.get(id(instance))
        if found is None or found[0] is not instance:
            found = (instance, JitFunction(self.fn.__get__(instance, owner), self.options, self.strict))
            self._bound[id(instance)] = found
        return found[1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.__qualname__
        if kwargs:
            raise JitError(name, f"keyword argument(s) {sorted(kwargs)}: a compiled function takes its inputs "
                           "positionally; pass them in order")
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args)):
            return for_trace(self.fn)(*args)  # inside another trace (a Cell's construct): inline, as a nested jit
        avals = [global_aval(x) for x in args]
        self._check_signature(avals)
        # a pipelined step (pipeline_stages > 1) is built for the settings in force, as TrainOneStepCell's is
        pipelined = _context.compile_key() if wants_pipeline() else None
        key = (tuple((a.shape, str(a.dtype)) for a in avals), tuple(hash(h) for h in self.options.hash_args),
               pipelined)
        entry = self.programs.get(key)
        if entry is None or not bindings_hold(entry.bindings):
            entry = self.programs[key] = self._capture(avals)
        if entry.per_rank is not None:
            return entry.per_rank(*args)
        if entry.program is None:
            return self.fn(*args)
        return entry.program.run_step(list(args))

    def _capture(self, avals: Sequence[jax.ShapeDtypeStruct]) -> "_Entry":
        name = self.__qualname__
        if wants_per_rank_function(self.fn):  # STAND_ALONE with collectives: once per rank, as written
            run = per_rank_function(self.fn)
            return _Entry(None, None, run)
        captured = capture_step(for_trace(self.fn), name, avals)  # its `if`s on traced values compiled
        if captured.problem is not None and self.strict:
            raise JitError(name, captured.problem)
        if captured.problem is None and captured.spec is None:
            notice_once(f"jit-no-gradient:{name}", f"jit({name}): the function takes no gradient, so graphpar runs "
                        "it as written; in GRAPH_MODE each Cell call in it is compiled and planned on its own")
        if captured.problem is not None or captured.spec is None:
            return _Entry(captured, None)
        if wants_pipeline():  # MPMD stages: the user's step run with the pipeline answering its calls
            return _Entry(captured, PipelinedStep(captured, _context.current_parallel().pipeline_stages))
        return _Entry(captured, FunctionalProgram(captured))

    def _check_signature(self, avals: Sequence[jax.ShapeDtypeStruct]) -> None:
        expected = self.options.input_signature
        if expected is None:
            return
        if len(expected) != len(avals):
            raise JitError(self.__qualname__, f"input_signature has {len(expected)} Tensor(s); the call passes "
                           f"{len(avals)} input(s)")
        for i, (e, a) in enumerate(zip(expected, avals)):
            shape_ok = len(e.shape) == len(a.shape) and all(d in (-1, None, s) for d, s in zip(e.shape, a.shape))
            if not shape_ok or np.dtype(e.dtype) != np.dtype(a.dtype):
                raise JitError(self.__qualname__, f"input {i} is {a.dtype}{list(a.shape)}; input_signature gives "
                               f"{e.dtype}{list(e.shape)}")


def step_of(cell_method: Callable[..., Any]) -> JitFunction:
    """A training Cell's ``construct`` compiled as a step when it is one (one gradient, one optimizer call), else
    run as written (``nn.runner``'s route for a top-level call of a Cell holding an optimizer)."""
    return JitFunction(cell_method, JitOptions(), strict=False)


def jit(function: Callable[..., Any] | None = None, *, capture_mode: str = "ast", jit_level: str = "O0",
        dynamic: int = 0, fullgraph: bool = False, backend: str = "", fn: Callable[..., Any] | None = None,
        mode: str = "PSJit", input_signature: Any = None, hash_args: Any = None, jit_config: Any = None,
        compile_once: bool = False, **options: Any) -> Any:
    """MindSpore's ``jit``: ``@jit``, ``@jit(...)`` or ``jit(function, ...)`` (see the module docstring)."""
    target = function if function is not None else fn

    def decorate(f: Callable[..., Any]) -> JitFunction:
        name = callable_name(f)
        if isinstance(f, Cell):
            raise JitError(name, "jit of a Cell object is not built: in GRAPH_MODE (set_context(mode=GRAPH_MODE)) "
                           "every top-level Cell call is compiled and planned; decorate a step function or a "
                           "method instead")
        if not callable(f):
            raise JitError(name, f"jit decorates a function or a method, got a {type(f).__name__}")
        _check_options(name, capture_mode, jit_level, dynamic, fullgraph, backend, mode, jit_config, compile_once,
                       options)
        given = hash_args if isinstance(hash_args, (list, tuple)) else (() if hash_args is None else (hash_args,))
        return JitFunction(f, JitOptions(_as_signature(name, input_signature), tuple(given)))

    return decorate if target is None else decorate(target)
