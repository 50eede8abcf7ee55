"""``mindspore.ops.auto_generate.gen_ops_prim``: the generated primitive classes, as MindSpore's tests reach them
(``ms.ops.auto_generate.gen_ops_prim.Swiglu()``)."""

from graphpar.ops.auto_generate.gen_ops_def import AddcmulExt, AddExt, SubExt  # noqa: F401
from graphpar.ops.norm_act_ops import Swiglu  # noqa: F401
