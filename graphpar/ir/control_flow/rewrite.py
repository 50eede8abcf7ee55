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
* every test (of an ``if``, a conditional expression, a ``while``) is evaluated by ``runtime.folded(lambda: test)``:
  operations on concrete values alone give a concrete value, so a test on a Cell's Tensor constants
  (``if self.keep_prob < 1.0:``) runs as Python, as MindSpore's graph mode folds it while compiling.
* every call ``f(...)`` becomes ``callee(f)(...)``: a function or method of the user's own code
  (not graphpar's, the standard library's or an installed package's) is called in its rewritten form, so an ``if``
  in a helper function a step or ``construct`` calls compiles as one written in ``construct`` does (MindSpore's graph
  mode compiles the functions ``construct`` calls too). Cells, primitives and library functions are called as they
  are (a Cell's ``construct`` is rewritten when the Cell is called).
* ``while test: body`` becomes two nested functions of the names the body assigns, the test and the body (its
  ``break``/``continue`` lowered into flags first: ``syntax.lower_jumps``), and one call
  ``(a, b) = runtime.while_stmt(test, body, (lambda: a, lambda: b), site)``: concrete tests iterate in Python, a
  traced one makes the rest of the loop one ``jax.lax.while_loop`` (``loop``).
* An ``if`` whose branches leave the block (``return``, ``break``/``continue`` of an outer loop, ``yield``), raise,
  delete a name or declare ``global``/``nonlocal`` keeps its Python form, and so does a ``while`` whose body does
  (``break``/``continue`` of the loop itself excepted) or that has an ``else``: their test becomes
  ``runtime.concrete(test, site, reason)``, which passes a concrete value through and refuses a traced one by name.

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
import textwrap
import tokenize
import types
import weakref
from collections.abc import Callable
from typing import Any

from graphpar._logging import notice_once
from graphpar.ir.control_flow import loop, runtime
from graphpar.ir.control_flow.syntax import HELPERS, PREFIX, assigned, has_named_expr, helper, lambda_, leaves
from graphpar.ir.control_flow.syntax import flag as syntax_flag
from graphpar.ir.control_flow.syntax import lower_jumps


_codes: dict[types.CodeType, types.CodeType | None] = {}  # original code -> rewritten (None: not rewritten)
_functions: "weakref.WeakKeyDictionary[Callable, Callable | None]" = weakref.WeakKeyDictionary()

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag


class _Rewriter(ast.NodeTransformer):
    """The rewrite of one function (see the module docstring)."""

    def __init__(self, filename: str, loads: collections.Counter):
        self.filename, self.loads, self.count = filename, loads, 0

    def site(self, node: ast.AST) -> ast.Constant:
        text = linecache.getline(self.filename, node.lineno).strip()
        return ast.Constant((self.filename, node.lineno, text))

    def test(self, expr: ast.expr) -> ast.expr:
        """A test expression with ``and``/``or``/``not`` made to work on traced values."""
        if has_named_expr(expr):
            return expr
        if isinstance(expr, ast.BoolOp):
            name = "and_" if isinstance(expr.op, ast.And) else "or_"
            return ast.Call(helper(name), [self.site(expr)] + [lambda_(self.test(v)) for v in expr.values], [])
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return ast.Call(helper("not_"), [self.test(expr.operand), self.site(expr)], [])
        return expr

    def condition(self, expr: ast.expr) -> ast.expr:
        """A test (:meth:`test`) evaluated by ``runtime.folded``: one on constants alone is concrete."""
        if has_named_expr(expr):
            return expr  # a lambda would bind its `:=` in its own scope
        return ast.Call(helper("folded"), [lambda_(self.test(expr))], [])

    def concrete(self, node: ast.If | ast.While, reason: str) -> ast.expr:
        return ast.Call(helper("concrete"), [self.condition(node.test), self.site(node), ast.Constant(reason)], [])

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        return node  # a class body's scope is not a function's: left as written

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id in _FRAME_BUILTINS:
            return node  # these read the calling frame: called directly
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == HELPERS:
            return node
        node.func = ast.copy_location(ast.Call(helper("callee"), [func], []), func)
        return node

    def visit_While(self, node: ast.While) -> Any:
        why = ("has an `else` clause" if node.orelse else None) or leaves(node.body, in_loop=True) or (
            "assigns a name in its test (`:=`)" if has_named_expr(node.test) else None)
        if why:  # kept as written: runs on a concrete test, refused by name on a traced one
            self.generic_visit(node)
            node.test = self.concrete(node, "while:" + why)
            return node
        self.count += 1
        body, brk, cnt = lower_jumps(node.body, self.count)
        flags = [n for n in (brk, cnt) if n]
        names = list(dict.fromkeys(flags + assigned(body)))
        inside = collections.Counter(n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                                     and isinstance(n.ctx, ast.Load))
        live = tuple(n for n in names if self.loads[n] > inside[n])  # read after the loop (or around it)
        test = node.test if brk is None else ast.BoolOp(ast.And(), [
            ast.UnaryOp(ast.Not(), ast.Name(brk, ast.Load())), node.test])
        body = ([syntax_flag(cnt, False, node)] if cnt else []) + body
        body = [s for stmt in body for s in self._statements(stmt)]
        test = self.condition(self.visit(ast.fix_missing_locations(ast.copy_location(test, node.test))))
        params = ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])
        result = ast.Return(ast.Call(helper("bound"), [ast.Call(ast.Name("locals", ast.Load()), [], []),
                                                        ast.Constant(tuple(names))], []))
        test_name, body_name = f"{PREFIX}test_{self.count}", f"{PREFIX}body_{self.count}"
        out: list[ast.stmt] = [syntax_flag(f, False, node) for f in flags]
        out += [ast.FunctionDef(test_name, params, [ast.Return(test)], [], None),
                ast.FunctionDef(body_name, params, body + [result], [], None)]
        site = ast.Constant(self.site(node).value + (tuple(names), live))
        call = ast.Call(helper("while_stmt"), [ast.Name(test_name, ast.Load()), ast.Name(body_name, ast.Load()),
                                               self.getters(names), site], [])
        header = ast.Pass(lineno=node.lineno, col_offset=node.col_offset, end_lineno=node.lineno,
                          end_col_offset=node.col_offset + 5)  # the `while` line: the loop's frame names it
        return [ast.fix_missing_locations(ast.copy_location(s, header)) for s in out + self.rebind(names, call)]

    def _statements(self, stmt: ast.stmt) -> list[ast.stmt]:
        new = self.visit(stmt)
        return new if isinstance(new, list) else [new]

    @staticmethod
    def getters(names: list[str]) -> ast.Tuple:
        return ast.Tuple([lambda_(ast.Name(n, ast.Load())) for n in names], ast.Load())

    @staticmethod
    def rebind(names: list[str], call: ast.Call) -> list[ast.stmt]:
        """``names = call``, then ``del`` each name left unbound (UNDEF), as Python leaves it."""
        out: list[ast.stmt] = []
        if names:
            out.append(ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())], call))
        else:
            out.append(ast.Expr(call))
        for n in names:
            unbound = ast.Compare(ast.Name(n, ast.Load()), [ast.Is()], [helper("UNDEF")])
            out.append(ast.If(unbound, [ast.Delete([ast.Name(n, ast.Del())])], []))
        return out

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        if has_named_expr(node):
            return node
        call = ast.Call(helper("if_exp"), [self.condition(node.test), lambda_(node.body), lambda_(node.orelse),
                                            self.site(node)], [])
        return ast.copy_location(call, node)

    def visit_If(self, node: ast.If) -> Any:
        why = leaves(node.body) or leaves(node.orelse)
        names = list(dict.fromkeys(assigned(node.body) + assigned(node.orelse)))
        inside = collections.Counter(n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                                     and isinstance(n.ctx, ast.Load))
        live = tuple(n for n in names if self.loads[n] > inside[n])  # read outside this if (after it, or a loop)
        self.generic_visit(node)
        if why:
            node.test = self.concrete(node, why)
            return node
        self.count += 1
        then_name, else_name = f"{PREFIX}then_{self.count}", f"{PREFIX}else_{self.count}"
        params = ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])
        # the names' values, UNDEF for one left unbound (a nested `if`'s branch not taken): read from locals()
        result = ast.Return(ast.Call(helper("bound"), [ast.Call(ast.Name("locals", ast.Load()), [], []),
                                                         ast.Constant(tuple(names))], []))
        then_def = ast.FunctionDef(then_name, params, list(node.body) + [result], [], None)
        else_def = ast.FunctionDef(else_name, params, list(node.orelse) + [result], [], None)
        site = ast.Constant(self.site(node).value + (tuple(names), live))
        call = ast.Call(helper("if_stmt"), [self.condition(node.test), ast.Name(then_name, ast.Load()),
                                             ast.Name(else_name, ast.Load()), self.getters(names), site], [])
        out: list[ast.stmt] = [then_def, else_def] + self.rebind(names, call)
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
    factory: ast.stmt = ast.FunctionDef(f"{PREFIX}factory", factory_args,
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


def _users(fn: types.FunctionType) -> bool:
    filename = fn.__code__.co_filename
    return loop.users_file(filename)


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
