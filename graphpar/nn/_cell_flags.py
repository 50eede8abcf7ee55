"""``Cell.add_flags`` / ``add_flags_recursive`` / ``Cell(flags=...)``: MindSpore's per-Cell compile flags.

MindSpore keeps a dictionary of flags on each Cell that its graph compiler reads. The ones its parallel scripts and
tests set are the mixed-precision flags (``add_flags_recursive(fp16=True)`` is exactly what its ``to_float(float16)``
does: ``fp16``, ``bf16``, ``fp32``) and ``defer_inline`` (a hint to inline the Cell's graph late). graphpar gives the
first their meaning through :meth:`Cell.to_float` and says once that the second changes nothing (the whole step is
traced into one XLA program, and XLA decides what to inline); any other flag is refused by name rather than
stored and ignored. The flags set are kept, so ``get_flags()`` answers as MindSpore's.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from graphpar._logging import notice_once
from graphpar.common import dtype as mstype
from graphpar.errors import CellError

_PRECISION = {"fp16": mstype.float16, "bf16": mstype.bfloat16, "fp32": mstype.float32}
_HINTS = {"defer_inline"}
KNOWN = tuple(sorted(set(_PRECISION) | _HINTS))


def precision(cell_name: str, flags: dict[str, Any], recursive: bool) -> np.dtype | None:
    """The compute dtype the flags ask for (None if none), after checking every flag is one graphpar acts on."""
    for key in flags:
        if key not in _PRECISION and key not in _HINTS:
            raise CellError(f"{cell_name}.add_flags({key}=...): unknown flag; graphpar acts on {', '.join(KNOWN)} "
                            "(the mixed-precision flags are what to_float sets; defer_inline is a compile hint)")
    if flags.get("defer_inline"):
        notice_once("cell-flag-defer_inline", f"{cell_name}.add_flags(defer_inline=True): graphpar traces the whole "
                    "step into one XLA program and XLA decides what to inline; the flag changes nothing",
                    logging.INFO)
    wanted = [dtype for key, dtype in _PRECISION.items() if flags.get(key)]
    if len(wanted) > 1:
        raise CellError(f"{cell_name}.add_flags({flags}): more than one of fp16, bf16, fp32 is True; set one")
    if wanted and not recursive:
        raise CellError(f"{cell_name}.add_flags({flags}): a precision flag applies to a Cell and the Cells below it "
                        "in graphpar; use add_flags_recursive(...) or to_float(dtype), which MindSpore's to_float "
                        "also calls")
    return wanted[0] if wanted else None
