"""Digests of what a step program is made of, the same in every process that builds the same program: the key of
the executable cache (``staging.executables``), which skips the step's autodiff trace, lowering and XLA's compile.

A digest is honest or absent. :func:`digest` walks plain values (numbers, strings, arrays by content, tuples, dicts,
shardings with their devices) and the objects of graphpar's own classes (every dataclass field, every attribute of a
Cell); anything else (a user's class, a function of the user's, an object it cannot see into) raises :class:`Unseen`,
and the caller builds the program without the executable cache (XLA's persistent cache still serves the compile).
The code a program is built from is covered by :func:`code_digest` (graphpar's own source files, the versions of
JAX, jaxlib, numpy, optax and flax: their functions and classes are described by name); the network's code by the planned graph (:func:`graph_parts`: the traced jaxpr with its
constants, every node's strategy, every value, the plan's layouts), since the network is traced and planned on
every run.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import itertools
import os
import types
from pathlib import Path
from typing import Any

import flax
import jax
import jaxlib
import numpy as np
import optax
from flax import nnx

from graphpar.common.parameter import Parameter
from graphpar.compile.plans.planned import Planned
from graphpar.planner.memory_model import OptimizerSlots


class Unseen(Exception):
    """A part of a program that :func:`digest` cannot see into (the message names it)."""


_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_PLAIN_TYPES = frozenset(_PLAIN)  # exactly these types (not a subclass: an IntEnum is walked as itself)
_CONTAINER_TYPES = frozenset({tuple, list, dict})
# planned-graph fields that report on planning rather than decide the program (timings, the search's record, the
# dump's note); every decision is also on the nodes and in the layouts
_REPORTS = {"pass_seconds", "search", "note"}
# attributes of a Cell covered elsewhere: a train cell's network is the planned graph, its optimizer a part of the
# recipe of its own; a train cell's compiled programs and an optimizer's state are results (the state's structure is
# in the step's signature)
CELL_PARTS_ELSEWHERE = frozenset({"network", "optimizer", "_programs", "_box"})


def digest(*parts: Any, arguments: frozenset[int] = frozenset(), skip: frozenset[str] = CELL_PARTS_ELSEWHERE) -> str:
    """sha256 of ``parts``. ``arguments``: ids of Variables whose values are the program's arguments (the network's
    parameters and state), described by name, shape and dtype only; any other array or Variable counts by content.
    ``skip``: attribute names of Cells left out (parts the caller covers otherwise, e.g. the network a train cell
    wraps). Raises :class:`Unseen`."""
    pieces: list[bytes] = []
    _walk(parts, pieces.append, arguments, skip, {})
    return hashlib.sha256(b"".join(pieces)).hexdigest()  # one update: the digest of the pieces in order


def _walk(value: Any, put, arguments: frozenset[int], skip: frozenset[str], seen: dict[int, tuple]) -> None:
    if isinstance(value, _PLAIN):
        put(f"{type(value).__name__}:{value!r};".encode())
        return
    container = type(value) in _CONTAINER_TYPES  # none of the next cases (most of what a planned graph holds)
    if not container and (isinstance(value, (enum.Enum, np.dtype, jax.ShapeDtypeStruct)) or (
            type(value).__module__ == "numpy.dtypes") or _is_extended_dtype(value)):
        put(f"{type(value).__name__}:{value!r};".encode())
        return
    if id(value) in seen:  # a shared or cyclic reference: its position, not its contents again
        put(f"ref{seen[id(value)][0]};".encode())
        return
    seen[id(value)] = (len(seen), value)  # kept alive: a temporary's id is never reused within one walk
    if not container and isinstance(value, (np.ndarray, np.generic, jax.Array)) and not _is_variable(value):
        if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            put(f"key:{value.dtype};".encode())  # a typed PRNG key: its implementation and its bits
            _walk(jax.random.key_data(value), put, arguments, skip, seen)
        else:
            array = np.asarray(value)
            put(f"array{array.shape}{array.dtype};".encode())
            put(np.ascontiguousarray(array).tobytes())
    elif isinstance(value, (tuple, list)):
        put(f"{type(value).__name__}[{len(value)}](".encode())
        for item in value:
            if type(item) in _PLAIN_TYPES:  # the first case above, inline: most items of a planned graph's nodes
                put(f"{type(item).__name__}:{item!r};".encode())
            else:
                _walk(item, put, arguments, skip, seen)
        put(b")")
    elif isinstance(value, (dict, type({}.items()))) or type(value).__name__ in ("HashableMapping", "FrozenDict"):
        items = sorted(dict(value).items(), key=lambda kv: repr(kv[0]))
        put(f"dict[{len(items)}](".encode())
        for item in itertools.chain.from_iterable(items):
            if type(item) in _PLAIN_TYPES:
                put(f"{type(item).__name__}:{item!r};".encode())
            else:
                _walk(item, put, arguments, skip, seen)
        put(b")")
    elif isinstance(value, (set, frozenset)):
        _walk(sorted(value, key=repr), put, arguments, skip, seen)
    elif isinstance(value, jax.sharding.NamedSharding):
        mesh = value.mesh
        put(f"named{mesh.axis_names}{mesh.devices.shape}{value.spec}{value.memory_kind};".encode())
        _walk([d.id for d in mesh.devices.flat], put, arguments, skip, seen)
    elif isinstance(value, jax.sharding.Sharding):
        put(f"{value!r};".encode())
        _walk(sorted(d.id for d in value.device_set), put, arguments, skip, seen)
    elif _is_variable(value):
        try:
            shape, dtype = np.shape(_raw(value)), str(jax.numpy.result_type(_raw(value)))
        except (TypeError, ValueError) as exc:  # a value that is not an array yet (a deferred initialisation)
            raise Unseen(f"{type(_raw(value)).__qualname__} value of {type(value).__qualname__}") from exc
        name = value.name if isinstance(value, Parameter) else ""
        put(f"var:{type(value).__name__}:{name}{shape}{dtype};".encode())
        if id(value) not in arguments:
            _walk(np.asarray(_raw(value)), put, arguments, skip, seen)
    elif type(value).__module__.startswith(("jax.", "jax._src")) and type(value).__name__ in (
            "Jaxpr", "ClosedJaxpr", "JaxprEqn", "Var", "Literal", "PyTreeDef", "ShapedArray"):
        put(f"{type(value).__name__}:{value};".encode())
    elif isinstance(value, OptimizerSlots):  # worked out from the optimizer (the recipe's) and these shapes
        put(b"optimizer-slots(")
        _walk(dict(value.avals), put, arguments, skip, seen)
        put(b")")
    elif dataclasses.is_dataclass(value) and _ours(type(value)):
        put(f"{_qualname(type(value))}(".encode())
        for f in dataclasses.fields(value):
            if f.name not in _REPORTS:
                put(f"{f.name}=".encode())
                _walk(getattr(value, f.name), put, arguments, skip, seen)
        put(b")")
    elif _ours(type(value)):
        try:
            attributes = vars(value)
        except TypeError as exc:  # a class of graphpar's with slots only: nothing to walk by name
            raise Unseen(_qualname(type(value))) from exc
        put(f"{_qualname(type(value))}(".encode())
        for name, item in sorted(attributes.items()):
            if name.startswith("_pytree__") or name in skip:
                continue
            put(f"{name}=".encode())
            _walk(item, put, arguments, skip, seen)
        put(b")")
    elif callable(value) and _ours_function(value):
        put(f"fn:{value.__module__}.{value.__qualname__}(".encode())
        cells = [c.cell_contents for c in (value.__closure__ or ())]
        _walk((cells, value.__defaults__, value.__kwdefaults__), put, arguments, skip, seen)
        put(b")")
    else:
        name = value.__qualname__ if isinstance(value, (types.FunctionType, type)) else ""
        raise Unseen(f"{type(value).__module__}.{type(value).__qualname__}" + (f" {name}" if name else ""))


def _is_extended_dtype(value: Any) -> bool:
    """A JAX extended dtype (a PRNG key's ``key<fry>``): described by its name."""
    if not type(value).__module__.startswith("jax") or isinstance(value, jax.sharding.Sharding):
        return False  # (asking JAX about a sharding costs its repr, in the TypeError's message)
    try:
        return jax.dtypes.issubdtype(value, jax.dtypes.extended)
    except TypeError:
        return False


def _ours(cls: type) -> bool:
    """A class whose every behaviour is graphpar's (it and all its bases defined in graphpar, flax, optax or the
    standard library): a user's subclass may override any method, so it is not."""
    return all(c.__module__.split(".")[0] in ("graphpar", "flax", "optax", "builtins", "abc", "typing")
               for c in cls.__mro__) and cls.__module__.startswith("graphpar")


def _ours_function(fn: Any) -> bool:
    """A plain function of graphpar, optax or JAX (their code is in :func:`code_digest` by content or version; what
    it closes over is walked with it), e.g. a PRNG implementation's seed function."""
    return isinstance(fn, types.FunctionType) and (fn.__module__ or "").split(".")[0] in ("graphpar", "optax", "jax")


def _is_variable(value: Any) -> bool:
    return isinstance(value, nnx.Variable)


def _raw(variable: Any) -> Any:
    return variable.get_raw_value()


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """graphpar's own code and the versions of what it builds steps with: every source file of the package
    (content), the versions of JAX, jaxlib, numpy, optax and flax. Read once per process (10-15 ms; on the
    executable cache's reader thread while the first step is traced: ``staging.prefetch``). Two threads may both
    compute it the first time: the same value."""
    h = hashlib.sha256(f"jax {jax.__version__} jaxlib {jaxlib.__version__} numpy {np.__version__} optax "
                       f"{optax.__version__} flax {flax.__version__}".encode())
    root = Path(__file__).resolve().parents[2]  # the graphpar package
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def environment() -> tuple:
    """What outside the program changes what XLA makes of it: XLA's flags, JAX's configuration (what it traces and
    lowers with), the devices (platform, kind, ids, processes)."""
    config = tuple(sorted((k, repr(v)) for k, v in jax.config.values.items()
                          if "cache" not in k and "log" not in k))
    devices = tuple((d.platform, d.device_kind, d.id, d.process_index) for d in jax.devices())
    return (os.environ.get("XLA_FLAGS", ""), os.environ.get("LIBTPU_INIT_ARGS", ""), config, devices,
            jax.process_count())


def graph_parts(planned: Planned) -> tuple:
    """Everything of a planned graph that the lowering reads: the traced jaxpr (the network's code, with its
    constants by content), every value (shape, dtype, kind, constant), every node (kind, names, scope, attributes,
    hints, strategy, recompute group) in order, the plan's mesh and layouts, the recompute settings (the shardings
    of the step's arguments are the signature's, which the caller digests)."""
    graph = planned.graph
    jaxpr = graph.closed_jaxpr
    nodes = [(n.id, n.kind, n.instance_name, n.scope, n.attrs, n.hint, n.out_hint, n.inputs, n.outputs, n.is_op,
              n.input_names, n.static_args, n.strategy, n.remat, n.debug_name, n.eqn is None)
             for n in graph.node_list()]
    values = [(v.id, v.shape, v.dtype, v.kind, v.name, v.producer, v.const) for v in graph.values.values()]
    _check_rules(jaxpr.jaxpr)
    return (str(jaxpr.jaxpr), list(jaxpr.consts), values, nodes, graph.inputs, graph.outputs, graph.name, graph.plan,
            graph.recompute_scopes, graph.inner_gradient, planned.purpose)


_CODE_ROOTS = ("graphpar", "jax", "jaxlib", "optax", "flax")
# objects a rule's closure may hold without deciding the program's code: data, and JAX's own bookkeeping
_DATA_ROOTS = _CODE_ROOTS + ("builtins", "numpy", "ml_dtypes", "collections", "functools", "typing")


def _check_rules(jaxpr: Any) -> None:
    """Refuse (:class:`Unseen`) a jaxpr whose equations carry code the printed jaxpr does not show: the derivative
    rules of ``custom_vjp_call`` / ``custom_jvp_call`` (``bwd=bwd``, ``jvp=<lambda>``: names only) and any other
    callable parameter. Rules of graphpar, JAX or optax are in :func:`code_digest`; a rule the user wrote (a
    ``jax.custom_vjp`` in ``construct``) could change without changing the key, so such a step is not cached."""
    for eqn in jaxpr.eqns:
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    _check_rules(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    _check_rules(sub)
                elif callable(sub) or _is_wrapped_fun(sub):
                    _check_code(sub, eqn.primitive.name, 0)


def _check_code(value: Any, primitive: str, depth: int) -> None:
    """``value`` (a rule, or what a rule's closure holds) is code of :data:`_CODE_ROOTS` all the way down."""
    if depth > 8:
        raise Unseen(f"{primitive} rule nested too deeply to describe")
    if _is_wrapped_fun(value):
        _check_code(value.f, primitive, depth + 1)
        for transform in value.transforms:
            _check_code(transform, primitive, depth + 1)
    elif isinstance(value, functools.partial):
        _check_code((value.func, value.args, value.keywords), primitive, depth + 1)
    elif isinstance(value, types.MethodType):
        _check_code((value.__func__, value.__self__), primitive, depth + 1)
    elif isinstance(value, types.FunctionType):
        if (value.__module__ or "").split(".")[0] not in _CODE_ROOTS:
            raise Unseen(f"{primitive} rule {value.__module__}.{value.__qualname__}")
        for cell in value.__closure__ or ():
            try:
                _check_code(cell.cell_contents, primitive, depth + 1)
            except ValueError:  # an empty cell
                continue
    elif isinstance(value, (tuple, list)):
        for item in value:
            _check_code(item, primitive, depth + 1)
    elif isinstance(value, dict):
        _check_code(list(value.values()), primitive, depth + 1)
    elif type(value).__module__.split(".")[0] not in _DATA_ROOTS:
        raise Unseen(f"{primitive} rule holding a {type(value).__module__}.{type(value).__qualname__}")


def _is_wrapped_fun(value: Any) -> bool:
    """JAX's wrapper of a rule (``linear_util.WrappedFun``, not public; not callable itself)."""
    return type(value).__name__ == "WrappedFun" and type(value).__module__.startswith("jax")
