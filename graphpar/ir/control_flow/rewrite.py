"""The source rewrite: a function's ``if`` statements, conditional expressions and ``while`` tests turned into calls
of ``control_flow.runtime``, compiled once per code object and cached.

What is rewritten (inside the function and the functions and lambdas nested in it; class bodies are left alone):

* ``if test: body [else: orelse]`` (``elif`` is an ``if`` in ``orelse``) becomes two nested functions, one per
  branch, each taking the names either branch assigns and returning them (``runtime.bound(locals(), names)``), and
  one call
  ``(a, b) = runtime.if_stmt(test, then, else, (lambda: a, lambda: b), site)`` followed by
  ``if a is runtime.UNDEF: del a`` for each name (a name the branch taken did not bind stays unbound, as in Python).
* ``x if test else y`` becomes ``runtime.if_exp(test, lambda: x, lambda: y, site)``.
* ``and`` / ``or`` / ``not`` in a test become ``runtime.and_`` / ``or_`` / ``not_`` (short-circuit kept for
  concrete values; ``jnp.logical_*`` for traced ones).
* every call ``f(...)`` becomes ``callee(f)(...)``: a function or method of the user's own code
  (not graphpar's, the standard library's or an installed package's) is called in its rewritten form, so an ``if``
  in a helper function a step or ``construct`` calls compiles as one written in ``construct`` does (MindSpore's graph
  mode compiles the functions ``construct`` calls too). Cells, primitives and library functions are called as they
  are (a Cell's ``construct`` is rewritten when the Cell is called).
* An ``if`` whose branches leave the block (``return``, ``break``/``continue`` of an outer loop, ``yield``), raise,
  delete a name or declare ``global``/``nonlocal`` keeps its Python form, and so does every ``while``: their test
  becomes ``runtime.concrete(test, site, reason)``, which passes a concrete value through and refuses a traced one
  by name.

Line numbers are the original ones and the code is compiled under the original file name, so tracebacks,
``linecache`` and graphpar's error messages name the user's line inside a branch. The rewritten function is built on
the original's globals, defaults and closure cells (the helpers reach it through one extra closure cell holding the
``runtime`` module), so it reads and rebinds exactly what the original does. A function with none of these
statements, without source (a builtin, a lambda, code typed at a prompt), or whose source does not parse as the
function is not rewritten (:func:`converted` returns None).
"""

from __future__ import annotations

import __future__
import ast
import collections
import inspect
import linecache
import os
import sysconfig
import textwrap
import tokenize
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from graphpar._logging import notice_once
from graphpar.ir.control_flow import runtime

HELPERS = "_graphpar_cf"  # the closure variable holding the runtime module (one underscore: no name mangling)
_PREFIX = "_graphpar_cf_"

_codes: dict[types.CodeType, types.CodeType | None] = {}  # original code -> rewritten (None: not rewritten)
_functions: "weakref.WeakKeyDictionary[Callable, Callable | None]" = weakref.WeakKeyDictionary()

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag


def _walk_scope(nodes: list[ast.AST]) -> Iterator[ast.AST]:
    """Every node of ``nodes`` in the same scope (nested functions, lambdas, classes and comprehensions are
    yielded but not entered)."""
    todo = list(reversed(nodes))
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
                             ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        todo.extend(reversed(list(ast.iter_child_nodes(node))))


def _assigned(nodes: list[ast.stmt]) -> list[str]:
    """The names ``nodes`` bind in their scope, in order of first binding."""
    names: dict[str, None] = {}
    for node in _walk_scope(nodes):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.setdefault(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.setdefault(node.name)
        elif isinstance(node, ast.NamedExpr):
            names.setdefault(node.target.id)
    return [n for n in names if not n.startswith(_PREFIX)]


def _leaves(nodes: list[ast.stmt]) -> str | None:
    """Why a branch made of ``nodes`` cannot be run as a function whose values are merged (None: it can)."""

    def visit(node: ast.AST, in_loop: bool) -> str | None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
        if isinstance(node, ast.Return):
            return "leaves the function with `return`"
        if isinstance(node, (ast.Break, ast.Continue)) and not in_loop:
            return f"leaves the enclosing loop with `{type(node).__name__.lower()}`"
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return f"suspends the function (`{type(node).__name__.lower()}`)"
        if isinstance(node, ast.Raise):
            return "raises an exception"
        if isinstance(node, ast.Delete):
            return "deletes a name with `del`"
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"declares `{type(node).__name__.lower()}`"
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):  # break/continue in the body are the loop's own
            parts = [(c, True) for c in node.body] + [(c, in_loop) for c in node.orelse]
            parts += [(c, in_loop) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
        else:
            parts = [(c, in_loop) for c in ast.iter_child_nodes(node)]
        for child, looped in parts:
            found = visit(child, looped)
            if found:
                return found
        return None

    for stmt in nodes:
        found = visit(stmt, False)
        if found:
            return found
    return None


def _has_named_expr(node: ast.AST) -> bool:
    """Whether ``node`` holds ``:=`` or a yield, which a lambda would bind or suspend in its own scope."""
    return any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(node))


def _helper(name: str) -> ast.Attribute:
    return ast.Attribute(ast.Name(HELPERS, ast.Load()), name, ast.Load())


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(ast.arguments([], [], None, [], [], None, []), body)


class _Rewriter(ast.NodeTransformer):
    """The rewrite of one function (see the module docstring)."""

    def __init__(self, filename: str, loads: collections.Counter):
        self.filename, self.loads, self.count = filename, loads, 0

    def site(self, node: ast.AST) -> ast.Constant:
        text = linecache.getline(self.filename, node.lineno).strip()
        return ast.Constant((self.filename, node.lineno, text))

    def test(self, expr: ast.expr) -> ast.expr:
        """A test expression with ``and``/``or``/``not`` made to work on traced values."""
        if _has_named_expr(expr):
            return expr
        if isinstance(expr, ast.BoolOp):
            name = "and_" if isinstance(expr.op, ast.And) else "or_"
            return ast.Call(_helper(name), [self.site(expr)] + [_lambda(self.test(v)) for v in expr.values], [])
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return ast.Call(_helper("not_"), [self.test(expr.operand), self.site(expr)], [])
        return expr

    def concrete(self, node: ast.If | ast.While, reason: str) -> ast.expr:
        return ast.Call(_helper("concrete"), [self.test(node.test), self.site(node), ast.Constant(reason)], [])

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        return node  # a class body's scope is not a function's: left as written

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in _FRAME_BUILTINS:
            return node  # these read the calling frame: called directly
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == HELPERS:
            return node
        node.func = ast.copy_location(ast.Call(_helper("callee"), [func], []), func)
        return node

    def visit_While(self, node: ast.While) -> ast.While:
        self.generic_visit(node)
        node.test = self.concrete(node, "while")
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        if _has_named_expr(node):
            return node
        call = ast.Call(_helper("if_exp"), [self.test(node.test), _lambda(node.body), _lambda(node.orelse),
                                            self.site(node)], [])
        return ast.copy_location(call, node)

    def visit_If(self, node: ast.If) -> Any:
        why = _leaves(node.body) or _leaves(node.orelse)
        names = list(dict.fromkeys(_assigned(node.body) + _assigned(node.orelse)))
        inside = collections.Counter(n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                                     and isinstance(n.ctx, ast.Load))
        live = tuple(n for n in names if self.loads[n] > inside[n])  # read outside this if (after it, or a loop)
        self.generic_visit(node)
        if why:
            node.test = self.concrete(node, why)
            return node
        self.count += 1
        then_name, else_name = f"{_PREFIX}then_{self.count}", f"{_PREFIX}else_{self.count}"
        params = ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])
        # the names' values, UNDEF for one left unbound (a nested `if`'s branch not taken): read from locals()
        result = ast.Return(ast.Call(_helper("bound"), [ast.Call(ast.Name("locals", ast.Load()), [], []),
                                                         ast.Constant(tuple(names))], []))
        then_def = ast.FunctionDef(then_name, params, list(node.body) + [result], [], None)
        else_def = ast.FunctionDef(else_name, params, list(node.orelse) + [result], [], None)
        getters = ast.Tuple([_lambda(ast.Name(n, ast.Load())) for n in names], ast.Load())
        site = ast.Constant(self.site(node).value + (tuple(names), live))
        call = ast.Call(_helper("if_stmt"), [self.test(node.test), ast.Name(then_name, ast.Load()),
                                             ast.Name(else_name, ast.Load()), getters, site], [])
        out: list[ast.stmt] = [then_def, else_def]
        if names:
            out.append(ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())], call))
        else:
            out.append(ast.Expr(call))
        for n in names:  # a name the branch taken left unbound stays unbound
            unbound = ast.Compare(ast.Name(n, ast.Load()), [ast.Is()], [_helper("UNDEF")])
            out.append(ast.If(unbound, [ast.Delete([ast.Name(n, ast.Del())])], []))
        return [ast.fix_missing_locations(ast.copy_location(s, node)) for s in out]


_FRAME_BUILTINS = frozenset({"locals", "globals", "vars", "super", "eval", "exec", "dir"})


def _needs_rewrite(fdef: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Call)) for n in ast.walk(fdef))


def _explicit_super(fdef: ast.FunctionDef) -> None:
    """``super()`` as ``super(__class__, self)``: a branch function or lambda has no ``self`` of its own."""
    first = (fdef.args.posonlyargs + fdef.args.args)[:1]
    if not first:
        return
    for node in ast.walk(fdef):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
                and not node.args and not node.keywords):
            node.args = [ast.Name("__class__", ast.Load()), ast.Name(first[0].arg, ast.Load())]


def _find_code(code: types.CodeType, name: str, line: int) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and const.co_firstlineno == line:
                return const
            found = _find_code(const, name, line)
            if found is not None:
                return found
    return None


def _rewrite_code(fn: types.FunctionType) -> types.CodeType | None:
    """The rewritten code object of ``fn`` (None: nothing to rewrite, or no usable source)."""
    code = fn.__code__
    # by the function where it is its own source: inspect finds its module through ``__module__``; from the code
    # object alone it scans every loaded module's file path (0.1 s of the first trace in a process with JAX loaded)
    source = fn if inspect.unwrap(fn) is fn else code
    try:
        lines, start = inspect.getsourcelines(source)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):  # no source, or not Python this parser reads
        return None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != code.co_name or not _needs_rewrite(fdef):
        return None
    ast.increment_lineno(tree, start - 1)
    fdef.decorator_list = []
    first = fdef.lineno
    loads = collections.Counter(n.id for n in ast.walk(fdef) if isinstance(n, ast.Name)
                                and isinstance(n.ctx, ast.Load))
    _explicit_super(fdef)
    fdef.body = [_Rewriter(code.co_filename, loads).visit(stmt) for stmt in fdef.body]
    fdef.body = [s for stmt in fdef.body for s in (stmt if isinstance(stmt, list) else [stmt])]
    factory_args = ast.arguments([], [ast.arg(HELPERS)] + [ast.arg(n) for n in code.co_freevars], None, [], [],
                                 None, [])
    factory: ast.stmt = ast.FunctionDef(f"{_PREFIX}factory", factory_args,
                                        [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], [], None)
    parts = fn.__qualname__.split(".")
    if len(parts) > 1 and parts[-2] != "<locals>":  # a method: private names are mangled with its class's name
        factory = ast.ClassDef(parts[-2], [], [], [factory], [])
    module = ast.Module([factory], [])
    for node in (module, factory):
        ast.copy_location(node, fdef)
    ast.fix_missing_locations(module)
    compiled = compile(module, code.co_filename, "exec", flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    new = _find_code(compiled, code.co_name, first)
    if new is None or not _same_function(code, new):
        return None  # the file changed since the function was defined: its source is not this code's
    return new


def _all_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_varnames) | set(code.co_freevars) | set(code.co_cellvars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _all_names(const)
    return names


def _same_function(old: types.CodeType, new: types.CodeType) -> bool:
    """Whether ``new`` was compiled from ``old``'s source: the same arguments, and every name ``old`` uses."""
    args = old.co_argcount + old.co_kwonlyargcount + old.co_posonlyargcount
    return (old.co_varnames[:args] == new.co_varnames[:args] and old.co_argcount == new.co_argcount
            and _all_names(old) <= _all_names(new))


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives: graphpar itself, the standard library, installed packages."""
    paths = sysconfig.get_paths()
    dirs = {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    dirs.update(os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    return tuple(sorted(d.rstrip(os.sep) + os.sep for d in dirs))


_LIBRARY_DIRS = _library_dirs()


def _users(fn: types.FunctionType) -> bool:
    filename = fn.__code__.co_filename
    return not filename.startswith("<") and not os.path.abspath(filename).startswith(_LIBRARY_DIRS)


def callee(fn: Any) -> Any:
    """What a rewritten call runs for ``fn``: the rewritten form of a plain function or method of the user's own
    code (see the module docstring), anything else unchanged."""
    if isinstance(fn, types.FunctionType) and _users(fn):
        return for_trace(fn)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType) and _users(fn.__func__):
        return for_trace(fn)
    return fn


class _Helpers:
    """What the rewritten code reaches through its ``_graphpar_cf`` cell: ``runtime``'s helpers and
    :func:`callee` (which needs the rewrite, so it cannot live in ``runtime``)."""

    def __init__(self) -> None:
        for name in dir(runtime):
            if not name.startswith("__"):
                setattr(self, name, getattr(runtime, name))
        self.callee = callee


_HELPERS = _Helpers()


def converted(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``fn`` with its ``if``/``while`` statements rewritten for traced conditions (see the module docstring), or
    None when it has none to rewrite. Cached per function (the rewrite itself per code object)."""
    if not isinstance(fn, types.FunctionType):
        return None
    try:
        return _functions[fn]
    except KeyError:
        pass
    code = fn.__code__
    if code not in _codes:
        try:
            _codes[code] = _rewrite_code(fn)
        except (SyntaxError, ValueError, TypeError, RecursionError) as exc:  # source the rewrite cannot compile
            notice_once(f"control-flow-rewrite:{code.co_filename}:{code.co_firstlineno}",
                        f"{fn.__qualname__} ({code.co_filename}:{code.co_firstlineno}) runs as written: its source "
                        f"could not be rewritten ({type(exc).__name__}: {exc}), so an `if` in it on a traced value "
                        "is not compiled")
            _codes[code] = None
    new_code = _codes[code]
    out = None
    if new_code is not None:
        cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
        cells[HELPERS] = types.CellType(_HELPERS)
        if all(n in cells for n in new_code.co_freevars):
            out = types.FunctionType(new_code, fn.__globals__, fn.__name__, fn.__defaults__,
                                     tuple(cells[n] for n in new_code.co_freevars))
            out.__kwdefaults__ = fn.__kwdefaults__
            out.__qualname__, out.__module__, out.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
            out.__dict__.update(fn.__dict__)
    _functions[fn] = out
    return out


def for_trace(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What a trace runs for ``fn``: its rewritten form (a bound method's rewritten function bound to the same
    object), or ``fn`` itself when there is nothing to rewrite."""
    if isinstance(fn, types.MethodType):
        new = converted(fn.__func__)
        return fn if new is None else types.MethodType(new, fn.__self__)
    new = converted(fn)
    return fn if new is None else new
