"""The Cells a Python function reaches through its free variables, as MindSpore's graph compiler resolves them.

MindSpore compiles a ``@jit`` function by resolving every name it reads (closure cells, module globals, default
arguments, the attributes of a method's ``self``) and, for a Cell, its Parameters; that is how the Parameters of a
``net`` the step never receives as an argument become inputs of the compiled graph. :func:`reachable_state` does
the same walk (``ir.free_variables.reach``): a Cell is collected and not entered (its whole tree is one piece of
state), and so is a Variable found outside a Cell; a bound method leads into its object's attributes. Any other
object is left alone: state kept on a plain object is reached only through a method of that object.

MindSpore resolves these names when it compiles and keeps the graph (``jit``'s ``hash_args`` names the free
variables whose change should recompile it). graphpar records every name it resolved and checks them on each call
(``free_variables.bindings_hold``, a few identity tests): a global, closure variable or attribute rebound to
another network or optimizer makes the next call capture the step again, rather than train the objects it no
longer names.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

from graphpar.ir.free_variables import Binding, reach
from graphpar.nn.cell import Cell


def reachable_state(*roots: Any) -> tuple[list[Cell], list[nnx.Variable], list[Binding]]:
    """Every Cell reachable from ``roots`` through free variables, in the order first reached (deterministic: the
    order names appear in the code), every Variable reached outside those Cells (a Parameter kept in a list or
    on a plain object: accumulators, a ParameterTuple of weights), and the names resolved on the way
    (``free_variables.bindings_hold``). A bound method leads into its object's attributes: a training Cell's own
    tree often holds what NNX cannot split (MindSpore's ParameterTuple of the weights)."""
    reached = reach(roots, lambda obj: isinstance(obj, (Cell, nnx.Variable)), method_attributes=True)
    return ([obj for obj in reached.objects if isinstance(obj, Cell)],
            [obj for obj in reached.objects if not isinstance(obj, Cell)], list(reached.bindings))
