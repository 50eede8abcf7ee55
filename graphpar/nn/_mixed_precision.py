"""Per-Cell compute dtypes (``Cell.to_float``, ``amp``): the casting lives in ``graphpar.ops._mixed_precision``,
below ``nn``, since Primitives carry a cast too; its names are kept here for ``nn`` and ``train``."""

from graphpar.ops._mixed_precision import CastCell as CastCell
from graphpar.ops._mixed_precision import CellCast as CellCast
from graphpar.ops._mixed_precision import call as call
from graphpar.ops._mixed_precision import cast_tree as cast_tree
from graphpar.ops._mixed_precision import entered as entered
from graphpar.ops._mixed_precision import is_float as is_float
from graphpar.ops._mixed_precision import set_compute_dtype as set_compute_dtype
from graphpar.ops._mixed_precision import set_output_dtype as set_output_dtype
