"""The syntax the rewrite reads (``control_flow.rewrite``): which names a block binds, why a block cannot become a
function whose values are merged or carried, and the lowering of a ``while`` body's ``break``/``continue`` into flags.

``break`` and ``continue`` of a loop whose test may be traced are lowered as JAX's own converters (autograph) lower
them, so that the loop body is one function of the names it carries: ``break`` sets the flag ``_graphpar_break_N``
and ``continue`` the flag ``_graphpar_continue_N``, every statement after one that may set a flag runs under ``if not
(break or continue):``, the continue flag is cleared at the top of each iteration, and the loop's test becomes ``not
break and (test)``. On concrete values this is exactly Python's loop (the test is not evaluated after a ``break``);
on traced ones the guarding ``if`` statements are compiled as any ``if`` (both paths merged with ``jnp.where``).
The flags do not start with ``PREFIX``, so :func:`assigned` counts them as names the body binds (they are carried).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

HELPERS = "_graphpar_cf"  # the closure variable holding the runtime module (one underscore: no name mangling)
PREFIX = "_graphpar_cf_"  # names of the functions the rewrite defines (not names the user's code binds)
FLAG_PREFIX = "_graphpar_"  # the flags of a lowered break/continue (names the body binds, carried by the loop)


def walk_scope(nodes: list[ast.AST]) -> Iterator[ast.AST]:
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


def assigned(nodes: list[ast.stmt]) -> list[str]:
    """The names ``nodes`` bind in their scope, in order of first binding."""
    names: dict[str, None] = {}
    for node in walk_scope(nodes):
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
    return [n for n in names if not n.startswith(PREFIX)]


def leaves(nodes: list[ast.stmt], in_loop: bool = False) -> str | None:
    """Why a branch made of ``nodes`` cannot be run as a function whose values are merged (None: it can);
    ``in_loop``: ``nodes`` are a loop's body, whose own ``break``/``continue`` are lowered (:func:`lower_jumps`)."""

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
        found = visit(stmt, in_loop)
        if found:
            return found
    return None


def has_named_expr(node: ast.AST) -> bool:
    """Whether ``node`` holds ``:=`` or a yield, which a lambda would bind or suspend in its own scope."""
    return any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(node))


def helper(name: str) -> ast.Attribute:
    return ast.Attribute(ast.Name(HELPERS, ast.Load()), name, ast.Load())


def lambda_(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(ast.arguments([], [], None, [], [], None, []), body)


_BLOCKS = {ast.If: ("body", "orelse"), ast.With: ("body",), ast.AsyncWith: ("body",),
           ast.Try: ("body", "orelse", "finalbody"), ast.TryStar: ("body", "orelse", "finalbody"),
           ast.ExceptHandler: ("body",), ast.match_case: ("body",)}


def _jumps(node: ast.AST) -> bool:
    """Whether ``node`` holds a ``break``/``continue`` of the loop whose body it is in (not of a nested loop)."""
    if isinstance(node, (ast.Break, ast.Continue)):
        return True
    if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return any(_jumps(c) for c in node.orelse)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.expr)):
        return False
    return any(_jumps(c) for c in ast.iter_child_nodes(node))


def flag(name: str, value: bool, where: ast.AST) -> ast.Assign:
    return ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], ast.Constant(value)), where)


def lower_jumps(body: list[ast.stmt], count: int) -> tuple[list[ast.stmt], str | None, str | None]:
    """``body`` of a ``while`` with its ``break``/``continue`` lowered into flags (see the module docstring), and
    the names of the break and continue flags it uses (None: not used). The caller binds the flags before the loop,
    clears the continue flag at the top of the body and adds ``not break`` to the test."""
    brk, cnt = f"{FLAG_PREFIX}break_{count}", f"{FLAG_PREFIX}continue_{count}"
    used: set[str] = set()

    def block(stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, (ast.Break, ast.Continue)):
                name = brk if isinstance(stmt, ast.Break) else cnt
                used.add(name)
                out.append(flag(name, True, stmt))
                return out  # what follows a jump in the same block never runs
            if not _jumps(stmt):
                out.append(stmt)
                continue
            out.append(inside(stmt))
            rest = block(stmts[i + 1:])
            if rest:
                flags = [ast.Name(n, ast.Load()) for n in (brk, cnt) if n in used]
                test = flags[0] if len(flags) == 1 else ast.BoolOp(ast.Or(), flags)
                out.append(ast.fix_missing_locations(ast.copy_location(
                    ast.If(ast.UnaryOp(ast.Not(), test), rest, []), stmts[i + 1])))
            return out
        return out

    def inside(stmt: ast.AST) -> ast.AST:
        for kind, fields in _BLOCKS.items():
            if isinstance(stmt, kind):
                for name in fields:
                    setattr(stmt, name, block(getattr(stmt, name)))
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                inside(child)
        return stmt

    lowered = block(list(body))
    return lowered, (brk if brk in used else None), (cnt if cnt in used else None)
