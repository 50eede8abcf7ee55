"""Python ``if`` and ``while`` on a traced value, compiled as MindSpore's graph mode compiles them.

MindSpore's graph mode parses a ``@jit`` function or a Cell's ``construct`` and compiles an ``if`` whose condition is
a Tensor as control flow. graphpar traces Python instead, so such an ``if`` would ask JAX for the value of a traced
array. ``rewrite`` rewrites the function's source once (cached per code object) so that each ``if``, conditional
expression and ``while`` test calls ``runtime``: a concrete condition runs the statement as Python does; a traced
one runs both branches and merges the names they bind and the state they write with ``jnp.where`` (``merge``, whose
docstring says why not ``lax.cond``); a traced ``while`` test makes the rest of the loop one ``jax.lax.while_loop``
carrying the names its body binds and the state it writes (``loop``). What cannot be merged or carried (a branch or
loop body that returns or raises, values of different shapes, a gradient through a loop) is refused by name, at the
user's file and line.

Who uses it: ``graphpar.jit`` / ``AutoParallel`` trace a step function's rewritten form (``compile.functional``), and
a Cell called inside a trace runs its rewritten ``construct`` (``nn.cell``); calls outside a trace run the original
function, unchanged.
"""

from graphpar.ir.control_flow.merge import BranchState as BranchState
from graphpar.ir.control_flow.rewrite import converted as converted
from graphpar.ir.control_flow.rewrite import for_trace as for_trace
