"""``ops.Print``: MindSpore's print from inside a compiled program.

Called eagerly (PYNATIVE_MODE, or outside any trace) it prints at once, in MindSpore's layout: strings as they are,
each Tensor as ``Tensor(shape=[2, 1], dtype=Int32, value=\\n[[1]\\n [1]])``, one input per line. Inside a compiled
program (a GRAPH_MODE ``construct``, a train step) the values exist only when the program runs, so the print is a
``jax.debug.print`` in the program: it prints every time the program runs, with that run's values, after the values
it reads are computed.

Ordering, as with MindSpore's Print in graph mode: the lines of one ``Print`` call come together and in order;
two ``Print`` calls of one program that do not depend on each other may print in either order (XLA schedules
them; ``jax.debug.print(..., ordered=True)`` is not used because JAX refuses ordered effects in programs that span
several devices), and a print in the backward pass of a recomputed op prints again. In a sharded program the
printed Tensor is the whole (global) value, gathered for the print.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from graphpar.common.dtype import ms_name


def _check(value: Any) -> None:
    if isinstance(value, (str, bool, int, float, jax.Array, np.ndarray, np.generic)):
        return
    if isinstance(value, (tuple, list)):
        for v in value:
            _check(v)
        return
    raise TypeError(f"Print: inputs must be Tensor, bool, int, float, str, tuple or list, got "
                    f"{type(value).__name__}")


def _flat(inputs: tuple) -> list[Any]:
    out: list[Any] = []
    for v in inputs:
        out.extend(_flat(tuple(v)) if isinstance(v, (tuple, list)) else [v])
    return out


def _tensor_head(x: Any) -> str:
    shape = ", ".join(str(d) for d in np.shape(x))
    return f"Tensor(shape=[{shape}], dtype={ms_name(x.dtype)}, value="


class Print:
    """``Print()(*inputs)``: print strings and Tensors (see the module docstring); returns None (MindSpore's output
    is to be ignored)."""

    def __call__(self, *inputs: Any) -> None:
        for v in inputs:
            _check(v)
        items = _flat(inputs)
        arrays = [v for v in items if isinstance(v, (jax.Array, np.ndarray, np.generic))]
        if not any(isinstance(a, jax.core.Tracer) for a in arrays):
            for v in items:
                print(f"{_tensor_head(v)}\n{np.asarray(v)})" if isinstance(v, (jax.Array, np.ndarray, np.generic))
                      else v)
            return None
        parts = []
        for v in items:
            if isinstance(v, (jax.Array, np.ndarray, np.generic)):
                parts.append(_tensor_head(v).replace("{", "{{").replace("}", "}}") + "\n{})")
            else:
                parts.append(str(v).replace("{", "{{").replace("}", "}}"))
        jax.debug.print("\n".join(parts), *arrays)
        return None
