"""The Python name an op call's result is assigned to in ``construct``: MindSpore's debug name of a node.

MindSpore parses ``construct``'s source, so each node of its IR carries the variable its value was assigned to
(``out1 = self.matmul1(x, w)`` prints as ``%3(out1) = PrimFunc_MatMul(...)``) and its unit tests grep IR dumps for
that form. graphpar traces instead of parsing; :func:`assigned_name` recovers the same name at trace time from the
calling frame: the source position of the call being executed (``co_positions`` of the frame's current
instruction) is matched against the assignments of the function's syntax tree. A call whose result is not assigned
as a whole to one plain name (a nested call, a tuple target, an attribute) has no name, as MindSpore then numbers
the node instead.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import sys
import textwrap
import tokenize
from types import CodeType, FrameType

_MAX_DEPTH = 12  # frames between the op's trace hook and the construct that called it


@functools.lru_cache(maxsize=512)
def _assignments(code: CodeType) -> dict[tuple[int, int, int, int], str]:
    """Source span (line, end line, column, end column) of each call assigned whole to one name -> that name."""
    # the function's lines straight from linecache, as inspect.getsourcelines finds a code object's, without its
    # module lookup (inspect.getmodule resolves the real path of every loaded module's file: 0.09 s CPU of the GPT
    # bench model's trace)
    first = code.co_firstlineno
    linecache.checkcache(code.co_filename)  # a file edited since it was read is read again, as inspect does
    try:
        lines = inspect.getblock(linecache.getlines(code.co_filename)[first - 1:])
    except (IndexError, SyntaxError, tokenize.TokenError):
        return {}
    if not lines:
        return {}
    source = "".join(lines)
    dedented = textwrap.dedent(source)
    shift = len(lines[0]) - len(lines[0].lstrip()) if dedented != source else 0
    try:
        tree = ast.parse(dedented)
    except SyntaxError:
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Call) and value.end_lineno is not None:
            lines_ = (value.lineno + first - 1, value.end_lineno + first - 1)
            end = value.end_col_offset or 0
            out[lines_ + (value.col_offset + shift, end + shift)] = target.id  # as the source runs
            out[lines_ + (value.col_offset, end)] = target.id  # as graphpar's control-flow rewrite compiles it
    return out


@functools.lru_cache(maxsize=512)
def _positions(code: CodeType) -> tuple[tuple[int | None, ...], ...]:
    """``code``'s position table, one entry per instruction (read once per code object: a ``construct`` calls
    dozens of ops, and walking the table up to each call's instruction is quadratic in the function's length)."""
    return tuple(code.co_positions())


def _call_span(frame: FrameType) -> tuple[int, int, int, int] | None:
    """The source span of the instruction ``frame`` executes (the call), from its code's position table."""
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    position = positions[index] if index < len(positions) else None
    if position is None or None in position:
        return None
    return position  # type: ignore[return-value]


def assigned_name(function: CodeType | None) -> str:
    """The name the innermost running call made from ``function`` (a ``construct``'s code object, or the code
    ``graphpar.ir.control_flow`` rewrote it to: the same source, dedented) assigns its result to, or "" (no such
    frame, or the result is not assigned whole to one name)."""
    if function is None:
        return ""
    frame = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return ""
        code = frame.f_code
        if code is function or (code.co_name == function.co_name and code.co_filename == function.co_filename
                                and code.co_firstlineno == function.co_firstlineno):  # or its rewritten form
            span = _call_span(frame)
            return _assignments(function).get(span, "") if span is not None else ""
        frame = frame.f_back
    return ""
